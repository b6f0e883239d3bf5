#!/usr/bin/perl
# Finding the tokenlock command, and what happens when it is missing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

use Tokenlock;

my $cmd = tokenlock_command();
my $dir = scratch_dir();
# Finding the command needs only an executable file, which these tests
# never run: without a built command, a stand-in.
if (!defined $cmd) {
    TokenlockTest::spit("$dir/tokenlock", "#!/bin/sh\nexit 70\n");
    chmod 0755, "$dir/tokenlock" or die "chmod: $!";
    $cmd = $ENV{TOKENLOCK_COMMAND} = "$dir/tokenlock";
}

is(Tokenlock::command_path(), $cmd, 'TOKENLOCK_COMMAND names the command');
is(Tokenlock::command_path(command => '/bin/true'), '/bin/true', 'the command option comes first');

# An explicit path that does not work is an error that names it, never a
# silent fall-back to another command.
for my $case (
    [{ command => "$dir/nothing/tokenlock" }, undef,             qr/\Q$dir\E\/nothing\/tokenlock \(from the command option\): it does not exist/],
    [{},                                      "$dir/no-such",    qr/\Q$dir\E\/no-such \(from TOKENLOCK_COMMAND\): it does not exist/],
    [{},                                      $dir,              qr/\(from TOKENLOCK_COMMAND\): it is a directory/],
  )
{
    my ($opts, $env, $re) = @$case;
    local $ENV{TOKENLOCK_COMMAND} = defined $env ? $env : $ENV{TOKENLOCK_COMMAND};
    # The command runs only when a call names one with the command option;
    # command_path() finds the one TOKENLOCK_COMMAND names.
    my $named = defined $opts->{command};
    my $ok = $named ? eval { Tokenlock::write_file("$dir/a.txt", "x", %$opts); 1 }
      : eval { Tokenlock::command_path(); 1 };
    my $err = $@;
    ok(!$ok, 'an unusable command fails');
    isa_ok($err, 'Tokenlock::Error');
    is($err->code, 'no_command', 'code no_command');
    like($err->message, $named ? qr/\ATokenlock: write \Q$dir\E\/a\.txt: cannot use the tokenlock command /
        : qr/\ATokenlock: find the tokenlock command: cannot use the tokenlock command /,
        'the message names the step and the file');
    like($err->message, $re, 'and the command and what is wrong with it');
    ok(!-e "$dir/a.txt", 'nothing was created');

    # The lock, the counter and the plain write are native: they need no
    # command at all (a command option still selects the command).
    my $lock = eval { Tokenlock->acquire("$dir/a.lock", %$opts) };
    ok($lock && $lock->held, 'acquire works without a usable command') or diag($@);
    ok(eval { $lock->release }, 'and so does release') or diag($@);
    if (!defined $opts->{command}) {
        is(eval { Tokenlock::increment("$dir/a.count") }, 1, 'increment works without a usable command') or diag($@);
        ok(eval { Tokenlock::write_file("$dir/a.page", "page\n") }, 'and so does write_file') or diag($@);
        is(TokenlockTest::slurp("$dir/a.page"), "page\n", 'which wrote the page');
        unlink "$dir/a.count", "$dir/a.page";
    }
}

# Not executable.
TokenlockTest::spit("$dir/plain", "#!/bin/sh\n");
chmod 0644, "$dir/plain";
my $ok = eval { Tokenlock::increment("$dir/c.count", command => "$dir/plain"); 1 };
ok(!$ok && $@->code eq 'no_command' && $@->message =~ /it is not executable/, 'a file that is not executable is refused')
  or diag($@);

# Found nowhere: the message says where it looked and what to do.
{
    local $ENV{TOKENLOCK_COMMAND} = '';
    local $ENV{PATH} = "$dir/empty-path";
    local $ENV{HOME} = "$dir/home";
    my $ok = eval { Tokenlock::command_path(); 1 };
    my $err = $@;
    ok(!$ok, 'no command anywhere fails');
    is($err->code, 'no_command', 'code no_command');
    like($err->message, qr/\ATokenlock: find the tokenlock command: cannot find the tokenlock command: looked for /, 'names the step');
    like($err->message, qr/\Q$FindBin::Bin\E\/tokenlock/,  'looked beside the script');
    like($err->message, qr/\Q$dir\E\/home\/bin\/tokenlock/, 'looked in ~/bin');
    like($err->message, qr/PATH \(\Q$dir\E\/empty-path\)/, 'looked in PATH');
    like($err->message, qr/set TOKENLOCK_COMMAND/,           'says how to fix it');
    ok(eval { Tokenlock::write_file("$dir/f", "x") }, 'while write_file, native, needs none') or diag($@);
}

# ~/bin, then PATH.
{
    mkdir "$dir/home";
    mkdir "$dir/home/bin";
    mkdir "$dir/pathdir";
    symlink($cmd, "$dir/pathdir/tokenlock") or die "symlink: $!";
    local $ENV{TOKENLOCK_COMMAND} = '';
    local $ENV{HOME} = "$dir/home";
    local $ENV{PATH} = "$dir/empty:$dir/pathdir";
    is(Tokenlock::command_path(), "$dir/pathdir/tokenlock", 'found in PATH');
    symlink($cmd, "$dir/home/bin/tokenlock") or die "symlink: $!";
    is(Tokenlock::command_path(), "$dir/home/bin/tokenlock", '~/bin comes before PATH');
    is(Tokenlock::increment("$dir/found.count"), 1, 'and it works');
}

# Beside the running script, for a script that does not load FindBin, run
# by a relative path and changing directories before the first call.
{
    my $sd = "$dir/scriptdir";
    mkdir $sd or die $!;
    symlink($cmd, "$sd/tokenlock") or die "symlink: $!";
    TokenlockTest::spit("$sd/s.pl", "chdir '/'; print Tokenlock::command_path(), qq(\\n);\n");
    chdir $dir or die $!;
    my ($st, $out, $err) = capture([$^X, '-I', "$FindBin::Bin/../lib", '-MTokenlock', 'scriptdir/s.pl'],
        env => { TOKENLOCK_COMMAND => undef, PATH => "$dir/empty", HOME => "$dir/nohome" });
    chdir '/';
    is($st, 0, 'a script without FindBin runs') or diag($err);
    is($out, "$dir/scriptdir/tokenlock\n", 'and finds the command beside itself');
    ($st, $out, $err) = capture([$^X, '-I', "$FindBin::Bin/../lib", '-MTokenlock', '-e', 'print Tokenlock::command_path()'],
        env => { TOKENLOCK_COMMAND => undef, PATH => "$dir/pathdir", HOME => "$dir/nohome" });
    is($out, "$dir/pathdir/tokenlock", 'perl -e has no script directory: PATH');
}

# A command that cannot be executed (a script without its interpreter):
# the exec failure is reported with its cause.
TokenlockTest::spit("$dir/broken", "#!$dir/no-interpreter\n");
chmod 0755, "$dir/broken";
$ok = eval { Tokenlock::increment("$dir/b.count", command => "$dir/broken"); 1 };
ok(!$ok, 'a command that cannot run fails');
is($@->code, 'no_command', 'code no_command');
like($@->message, qr/cannot run the tokenlock command \Q$dir\E\/broken: No such file or directory/, 'with the cause');

done_testing();
