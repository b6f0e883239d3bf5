#!/usr/bin/perl
# The wait of increment and write_file: with the real command, and with
# stand-ins for a command whose write and incr take -w and for an older one
# that refuses it. The stand-ins record their arguments and pass the call on
# to the real command, so that each path is taken whatever it accepts.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

use Tokenlock qw(increment write_file);

my $cmd = tokenlock_command();
my $dir = scratch_dir();

# A stand-in: logs its arguments, one call per line; refuses -w the way an
# incr without it does (with $refuse), or drops it before calling the real
# command; the first $fail_first calls of incr end as a timed-out wait.
sub stand_in {
    my ($name, %o) = @_;
    my $path = "$dir/$name";
    my $log  = "$path.log";
    my $n    = "$path.calls";
    TokenlockTest::spit($path, <<"PERL");
#!$^X
use strict;
open(my \$log, '>>', '$log') or die;
print {\$log} join(' ', \@ARGV), "\\n";
close \$log;
my \@args = \@ARGV;
if (grep { \$_ eq '-w' } \@args) {
    if ($o{refuse}) {
        print STDERR "tokenlock \$args[0]: unrecognised option '-w'\\nTry 'tokenlock \$args[0] --help'.\\n";
        exit 64;
    }
    for my \$i (0 .. \$#args) { if (\$args[\$i] eq '-w') { splice(\@args, \$i, 2); last } }
}
if (\$args[0] eq 'incr') {
    my \$calls = 0;
    if (open(my \$c, '<', '$n')) { \$calls = <\$c>; close \$c }
    open(my \$c, '>', '$n') or die;
    print {\$c} \$calls + 1;
    close \$c;
    if (\$calls < $o{fail_first}) {
        print STDERR "tokenlock: acquire $dir/x.count.lock: timed out after 10000 ms; the lock is held by pid 1\\n";
        exit 1;
    }
}
exec '$cmd', \@args;
PERL
    chmod 0755, $path;
    return ($path, $log);
}

sub calls { my $l = TokenlockTest::slurp($_[0]); return defined $l ? [split /\n/, $l] : [] }

SKIP: {
skip(command_skip('the command option (stand-ins that pass their calls on to the command)'), 20) unless $cmd;
# --- a command whose incr takes -w ---------------------------------------------------
{
    my ($with, $log) = stand_in('with-w', refuse => 0, fail_first => 0);
    is(increment("$dir/a.count", wait => 2.5, command => $with), 1, 'increment through a command that takes -w');
    is(increment("$dir/a.count", wait => 0, command => $with), 2, 'again, wait => 0');
    is(increment("$dir/a.count", command => $with), 3, 'and without wait');
    is_deeply(calls($log), [
        "incr --by 1 --sync file_and_dir -w 2.5 $dir/a.count",
        "incr --by 1 --sync file_and_dir -w 0 $dir/a.count",
        "incr --by 1 --sync file_and_dir $dir/a.count",
    ], 'the wait is passed as -w, one run per call');
}

# --- a command that refuses -w ---------------------------------------------------------
{
    my ($without, $log) = stand_in('without-w', refuse => 1, fail_first => 0);
    is(increment("$dir/b.count", wait => 3, command => $without), 1, 'increment through a command that refuses -w');
    is(increment("$dir/b.count", wait => 3, command => $without), 2, 'again');
    is_deeply(calls($log), [
        "incr --by 1 --sync file_and_dir -w 3 $dir/b.count",
        "incr --by 1 --sync file_and_dir $dir/b.count",
        "incr --by 1 --sync file_and_dir $dir/b.count",
    ], 'tried once with -w, then without it for the rest of the process');
}

# --- write_file, the same way -----------------------------------------------------------
{
    my ($with, $log) = stand_in('write-with-w', refuse => 0, fail_first => 0);
    write_file("$dir/w1", "one\n", lock => "$dir/w1.lock", wait => 1.5, command => $with);
    is(TokenlockTest::slurp("$dir/w1"), "one\n", 'write_file with wait through a command that takes -w');
    my ($without, $log2) = stand_in('write-without-w', refuse => 1, fail_first => 0);
    write_file("$dir/w2", "two\n", lock => "$dir/w2.lock", wait => 1.5, command => $without);
    write_file("$dir/w2", "three\n", lock => "$dir/w2.lock", wait => 1.5, command => $without);
    is(TokenlockTest::slurp("$dir/w2"), "three\n", 'and through one that refuses it, the data sent again');
    is_deeply([calls($log), calls($log2)], [
        ["write --allow-empty --sync file_and_dir --lock $dir/w1.lock -w 1.5 $dir/w1"],
        ["write --allow-empty --sync file_and_dir --lock $dir/w2.lock -w 1.5 $dir/w2",
         "write --allow-empty --sync file_and_dir --lock $dir/w2.lock $dir/w2",
         "write --allow-empty --sync file_and_dir --lock $dir/w2.lock $dir/w2"],
    ], 'the command lines');
    my $ok = eval { write_file("$dir/w3", "x", wait => 1); 1 };
    ok(!$ok && $@->code eq 'bad_argument' && $@->message =~ /wait applies to the lock/, 'wait without lock is a usage error');
    ok(!-e "$dir/w3", 'and writes nothing');
}

# --- a wait longer than the command's own is made of several ----------------------------
{
    my ($slow, $log) = stand_in('times-out-twice', refuse => 1, fail_first => 2);
    is(increment("$dir/c.count", wait => 30, command => $slow), 1, 'wait => 30: two timed-out runs, then it counts');
    is(scalar(@{ calls($log) }), 4, 'the -w try and three runs of incr');

    ($slow, $log) = stand_in('times-out-once', refuse => 1, fail_first => 1);
    my $ok = eval { increment("$dir/d.count", wait => 5, command => $slow); 1 };
    ok(!$ok, 'wait => 5: one timed-out run of the command is the whole wait');
    is($ok ? '' : $@->code, 'timed_out', 'timed_out');
    ok(!-e "$dir/d.count", 'nothing was counted');

    ($slow, $log) = stand_in('times-out-thrice', refuse => 1, fail_first => 3);
    $ok = eval { increment("$dir/e.count", wait => 25, command => $slow); 1 };
    is($ok ? '' : $@->code, 'timed_out', 'wait => 25: gives up after two runs rather than overrun the wait');
    is(scalar(@{ calls($log) }), 3, 'the -w try and two runs');
}
}

# --- busy and timed_out, with nothing changed ---------------------------------------------
SKIP: {
    # A command there must share the wait (native calls need none).
    my ($st, $help) = $cmd ? capture([$cmd, 'incr', '--help']) : (0, '--wait');
    skip('this tokenlock incr takes no -w', 14) unless $help =~ /--wait/;
    my $c = "$dir/held.count";
    my $f = "$dir/held.txt";
    TokenlockTest::spit($c, "7\n");
    TokenlockTest::spit($f, "before\n");
    my $lock = Tokenlock->acquire("$dir/held.lock");
    my $counter_lock = Tokenlock->acquire("$c.lock");
    for my $case ([0, 'busy'], [0.3, 'timed_out']) {
        my ($wait, $code) = @$case;
        my $ok = eval { increment($c, wait => $wait); 1 };
        is($ok ? 'counted' : $@->code, $code, "increment, wait => $wait, lock held: $code");
        like($ok ? '' : $@->message, qr/\Q$c\E\.lock/, 'the message names the lock');
        is(TokenlockTest::slurp($c), "7\n", 'the counter is unchanged');
        is(scalar(leftovers($dir, 'held.count')), 0, 'no temporary file is left');
        $ok = eval { write_file($f, "after\n", lock => "$dir/held.lock", wait => $wait); 1 };
        is($ok ? 'written' : $@->code, $code, "write_file, wait => $wait, lock held: $code");
        is(TokenlockTest::slurp($f), "before\n", 'the file is unchanged');
        is(scalar(leftovers($dir, 'held.txt')), 0, 'no temporary file is left');
    }
    $lock->release;
    $counter_lock->release;
}

done_testing();
