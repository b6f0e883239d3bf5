#!/usr/bin/perl
# The native module never maps the wait board (docs/protocol.md, The line
# of waiters): command waiters that line up on it beside native processes
# that keep taking the lock must still get it within their wait.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

use Tokenlock;

my $cmd = tokenlock_command();
skip_all_without_command('command waiters on the wait board');
my $dir = scratch_dir();
my $L = "$dir/b.lock";

my $lock = Tokenlock->acquire($L);
my $stop = "$dir/stop";
# Three command waiters, each holding the lock once for a moment.
my @waiters = map {
    my $i = $_;
    fork_worker(sub {
        my ($st, undef, $err) = capture([$cmd, 'run', '-w', '20', $L, 'true']);
        die "waiter $i: $err" if $st;
    });
} 1 .. 3;
# They have looked at the lock and seen it held once the board exists.
my $give_up = time + 20;
until (-e "$L.wait") {
    BAIL_OUT('no wait board appeared: the command waiters did not wait') if time > $give_up;
    select(undef, undef, undef, 0.005);
}
ok(-e "$L.wait", 'the command waiters line up on their board');
$lock->release;
# Two native processes take the lock again and again, never looking at the
# board, until the waiters are done.
my @natives = map {
    fork_worker(sub {
        my $n = 0;
        until (-e $stop) {
            Tokenlock::with_lock($L, sub { $n++ }, wait => 20);
        }
        die "never got the lock\n" unless $n;
    });
} 1 .. 2;
is(reap($_), 0, 'a command waiter got the lock within its wait') for @waiters;
TokenlockTest::spit($stop, '');
is(reap($_), 0, 'a native process ended well') for @natives;
is(Tokenlock::holder($L), undef, 'the lock is free at the end');

done_testing();
