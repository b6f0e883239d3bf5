#!/usr/bin/perl
# The native module beside the widely copied Perl rename lock
# (tests/legacy/my_flock.pl) on one lock directory: that procedure never
# takes a token of ours, and both count one counter together exactly.
use strict;
use warnings;
use FindBin;
# In the source tree, beside the module's own tests: what they run
# (counter.pl, the legacy procedure, counter.cgi) is not part of the module.
use lib "$FindBin::Bin/../../../bindings/perl/t/lib", "$FindBin::Bin/../../../bindings/perl/lib";
use Test::More;
use TokenlockTest;

use Tokenlock qw(increment);

tokenlock_command();
my $dir = scratch_dir();
my $my_flock = TokenlockTest::repo_dir() . '/tests/legacy/my_flock.pl';
plan(skip_all => "no $my_flock") unless -f $my_flock;

my $L = "$dir/shared.lock";
{
    my $lock = Tokenlock->acquire($L);
    # A timeout of 0: any token whose name it could read a time from would
    # be taken over at once.
    my ($st) = capture([$^X, $my_flock, $L, 0, 0.01, 'try', 0.3]);
    is($st >> 8, 2, 'the legacy procedure does not get a lock the module holds, even with a timeout of 0');
    ok($lock->held && -d "$L/" . $lock->token, 'and leaves our token where it is');
    $lock->release;
    ($st) = capture([$^X, $my_flock, $L, 60, 0.01, 'try', 5]);
    is($st, 0, 'once released, it gets the lock');
}

{
    my $c = "$dir/c.count";
    my @kids = map {
        fork_worker(sub {
            my ($st, undef, $err) = capture([$^X, $my_flock, $L, 60, 0.001, 'incr', $c, 100]);
            die "my_flock: $err" if $st;
        });
    } 1 .. 2;
    push @kids, map { fork_worker(sub { increment($c, lock => $L, wait => 60) for 1 .. 100 }) } 1 .. 2;
    is(reap($_), 0, 'a worker ended well') for @kids;
    is(slurp($c), "400\n", 'legacy and native incrementers on one lock: exact');
    is(Tokenlock::holder($L), undef, 'the lock is free at the end');
}

done_testing();
