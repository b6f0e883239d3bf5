#!/usr/bin/perl
# Many processes at once: nothing is lost.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

use Tokenlock qw(with_lock increment);

my $cmd = tokenlock_command();
my $dir = scratch_dir();

my $PROCS = 8;

# Starts $PROCS workers that block until the gate opens, so that they all
# start together; returns their pids and the pipe each reports on.
sub start_workers {
    my ($work) = @_;
    pipe(my $gate_r, my $gate_w) or die $!;
    my (@pids, @pipes);
    for my $n (1 .. $PROCS) {
        pipe(my $r, my $w) or die $!;
        push @pids, fork_worker(sub {
            close $gate_w;
            close $r;
            my $buf;
            sysread($gate_r, $buf, 1);    # end of file: the gate opened
            $work->($w, $n);
        });
        close $w;
        push @pipes, $r;
    }
    close $gate_r;
    close $gate_w;    # opens the gate
    return (\@pids, \@pipes);
}

# --- 8 x 50 read-modify-write cycles of a plain file under with_lock --------
{
    my $file = "$dir/plain.txt";
    my $L    = "$dir/plain.lock";
    TokenlockTest::spit($file, "0\n");
    my $ROUNDS = 50;
    my ($pids, $pipes) = start_workers(sub {
        my ($w) = @_;
        for (1 .. $ROUNDS) {
            with_lock($L, sub {
                # Deliberately not atomic: only the lock keeps two
                # processes from reading the same value.
                open(my $in, '<', $file) or die "read $file: $!";
                my $v = <$in>;
                close $in;
                open(my $out, '>', $file) or die "write $file: $!";
                print {$out} $v + 1, "\n";
                close $out or die "close $file: $!";
            }, wait => 120);
        }
        syswrite $w, "done\n";
    });
    my $done = grep { defined(read_line($_)) } @$pipes;
    is($done, $PROCS, "$PROCS processes finished their rounds");
    is((grep { reap($_) == 0 } @$pids), $PROCS, 'all ended well');
    is(TokenlockTest::slurp($file), ($PROCS * $ROUNDS) . "\n", "$PROCS x $ROUNDS increments under with_lock: none lost");
    is(lock_status($L)->{state}, 'free', 'the lock is free at the end');
}

# --- increment() from 8 processes ---------------------------------------------
{
    my $file   = "$dir/hits.count";
    my $ROUNDS = 25;
    my ($pids, $pipes) = start_workers(sub {
        my ($w) = @_;
        syswrite $w, increment($file, sync => 'none') . "\n" for 1 .. $ROUNDS;
    });
    my @values;
    for my $r (@$pipes) {
        while (defined(my $v = read_line($r))) { push @values, $v }
    }
    is((grep { reap($_) == 0 } @$pids), $PROCS, 'all incrementing processes ended well');
    my $total = $PROCS * $ROUNDS;
    is(TokenlockTest::slurp($file), "$total\n", "$PROCS x $ROUNDS increments: the counter is exact");
    is_deeply([sort { $a <=> $b } @values], [1 .. $total], 'and each value was handed out exactly once');
    is(scalar(leftovers($dir, 'hits.count')), 0, 'no temporary file is left');
}

done_testing();
