#!/usr/bin/perl
# The native module starts no process: fork, system and backticks are made
# to die before the module is loaded (exec without a fork would end this
# test, which would then fail), no command is anywhere to be found, and
# every operation still works.
use strict;
use warnings;

my @started;
BEGIN {
    for my $name (qw(fork system readpipe)) {
        no strict 'refs';
        *{"CORE::GLOBAL::$name"} = sub { push @started, $name; die "a process was started with $name\n" };
    }
}

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use File::Temp ();
use Test::More;

$ENV{TOKENLOCK_COMMAND} = '';
$ENV{PATH} = '/nonexistent';
$ENV{HOME} = '/nonexistent';

require Tokenlock;

my $dir = File::Temp::tempdir('tokenlock-perl-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $L = "$dir/a.lock";

my $lock = Tokenlock->acquire($L, wait => 0);
ok($lock->held, 'acquire');
is(Tokenlock::holder($L)->{pid}, $$, 'holder');
ok(!Tokenlock->try_acquire($L), 'try_acquire of a held lock');
ok($lock->refresh(lease => 30), 'refresh');
ok($lock->release, 'release');
is(Tokenlock::with_lock($L, sub { 42 }), 42, 'with_lock');
is(Tokenlock::increment("$dir/c.count"), 1, 'increment');
is(Tokenlock::increment("$dir/c.count", lock => $L), 2, 'increment under a lock of its own');
ok(Tokenlock::write_file("$dir/f", "x\n"), 'write_file');
ok(Tokenlock::write_file("$dir/f", "y\n", lock => $L, sync => 'file'), 'write_file under a lock');
symlink('f', "$dir/link") or die;
ok(Tokenlock::write_file("$dir/link", "z\n", follow_symlinks => 1), 'write_file following a link');
is(Tokenlock::read_counter("$dir/c.count"), 2, 'read_counter');
my $ok = eval { Tokenlock::increment("$dir/c.count", command => '/nonexistent/tokenlock'); 1 };
is($ok ? 'ok' : $@->code, 'no_command', 'only a named command is looked for, and refused here');
is_deeply(\@started, [], 'no process was started');

done_testing();
