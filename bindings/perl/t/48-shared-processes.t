#!/usr/bin/perl
# Shared locks and semaphores across processes (docs/protocol.md, Shared locks and semaphores:
# What the promises are): readers hold together; a writer waits for them
# and then holds alone; a writer among looping readers gets in within two
# holds and a poll; a semaphore never admits more than its slots; a holder
# killed with kill -9 frees its share at once; a writer's mark is taken off
# when its wait ends, and by a reader when the writer died.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use POSIX ();
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC CLOCK_REALTIME);
use TokenlockTest;

use Tokenlock;

my $dir = scratch_dir();
my $n   = 0;

sub fresh { return "$dir/l" . ++$n . '.lock' }
sub now   { clock_gettime(CLOCK_MONOTONIC) }

sub token_of {
    my ($d) = @_;
    my @t = grep { /\Alockfile/ } entries($d);
    return @t == 1 ? $t[0] : "(@t)";
}

sub shares_in { my ($d) = @_; return grep { /\As\./ } entries("$d/" . token_of($d)) }

# A child that holds the lock as %opts say, reports "held" on its pipe,
# and releases when a byte comes through its gate (a pipe: not its end of
# file, since the children forked later hold its writer too). Returns
# (pid, report pipe, gate writer).
sub holder {
    my ($L, %opts) = @_;
    pipe(my $r, my $w) or die $!;
    pipe(my $gr, my $gw) or die $!;
    my $pid = fork_worker(sub {
        close $r;
        close $gw;
        my $lock = Tokenlock->acquire($L, wait => 10, lease => 60, %opts);
        syswrite $w, "held\n";
        my $buf;
        sysread($gr, $buf, 1);
        # The last moment it is known to hold: a writer let in later than
        # the release's rename may come before a clock read after it.
        my $holding = clock_gettime(CLOCK_REALTIME);
        $lock->release;
        syswrite $w, sprintf("released %.6f\n", $holding);
    });
    close $w;
    close $gr;
    return ($pid, $r, $gw);
}

# --- 8 readers hold at once --------------------------------------------------------
{
    my $L = fresh();
    my $in = "$dir/in-readers";
    mkdir $in or die;
    my $PROCS = 8;
    my @kids;
    for my $k (1 .. $PROCS) {
        pipe(my $r, my $w) or die $!;
        push @kids, [fork_worker(sub {
            close $r;
            my $lock = Tokenlock->acquire($L, shared => 1, wait => 20, lease => 60);
            spit("$in/$$", '');
            # Inside the hold, each waits for all the others to be inside.
            my $all = until_true(sub { entries($in) >= $PROCS }, 20);
            syswrite $w, scalar(entries($in)) . "\n";
            until_true(sub { -e "$dir/readers-go" }, 20);
            $lock->release;
        }), $r];
        close $w;
    }
    my @seen = map { read_line($_->[1]) } @kids;
    spit("$dir/readers-go", '');
    my @st = map { reap($_->[0]) } @kids;
    is_deeply(\@seen, [($PROCS) x $PROCS], "$PROCS readers held the lock at the same time (each counted $PROCS inside)");
    is_deeply(\@st, [(0) x $PROCS], 'and every one released it without error');
    is(token_of($L), 'lockfile', 'the last one out freed it');
    is_deeply([shares_in($L)], [], 'no entry left behind');
}

# --- a writer waits for the readers, then holds alone ---------------------------------
{
    my $L = fresh();
    my @readers = map { [holder($L, shared => 1)] } 1 .. 3;
    is(read_line($_->[1]), 'held', 'a reader holds') for @readers;
    pipe(my $r, my $w) or die $!;
    my $writer = fork_worker(sub {
        close $r;
        my $lock = Tokenlock->acquire($L, wait => 20, lease => 60);
        my $t = sprintf('%.6f', clock_gettime(CLOCK_REALTIME));
        my $alone = scalar(Tokenlock::holders($L)) == 1 && !defined Tokenlock->try_acquire($L, shared => 1) ? 1 : 0;
        syswrite $w, "$t $alone\n";
        $lock->release;
    });
    close $w;
    ok(until_true(sub { token_of($L) =~ /\.12000000[0-9]{12}\./ }, 10), 'the writer marked the cover: a draining cover (kind 2)');
    is(join(',', sort map { $_->{waiting_writer} ? 'waiting' : $_->{mode} } Tokenlock::holders($L)),
        'shared,shared,shared,waiting', 'holders: three shares and a writer waiting');
    my $late = eval { Tokenlock->acquire($L, shared => 1, wait => 0) };
    is(ref $@ && $@->code, 'busy', 'a reader that comes after the mark does not join');
    my @released;
    for my $rd (@readers) {
        syswrite $rd->[2], 'x';
        my $line = read_line($rd->[1]);
        push @released, ($line =~ /\Areleased ([0-9.]+)\z/)[0];
        is(reap($rd->[0]), 0, 'a reader released');
    }
    my ($got, $alone) = split ' ', read_line($r);
    is(reap($writer), 0, 'the writer got the lock');
    my ($last) = sort { $b <=> $a } @released;
    cmp_ok($got, '>', $last, 'only after the last reader had left');
    is($alone, 1, 'and held it alone: no other holder, no reader let in');
    is(token_of($L), 'lockfile', 'free after it');
}

# --- writer preference: a writer among looping readers -------------------------------
{
    my $L = fresh();
    my $HOLD = 0.1;
    my $stop = "$dir/stop-loopers";
    my @loopers = map {
        fork_worker(sub {
            until (-e $stop) {
                my $lock = Tokenlock->acquire($L, shared => 1, wait => 20, lease => 60);
                select(undef, undef, undef, $HOLD);
                $lock->release;
            }
        });
    } 1 .. 4;
    ok(until_true(sub { scalar(shares_in($L)) >= 2 }, 10), 'the readers hold the lock together, over and over');
    my @took;
    for my $round (1 .. 4) {
        # The last round polls, as waiters do on a network filesystem.
        local $Tokenlock::Turnstile::FS_TYPE{$L} = 'nfs4' if $round == 4;
        my $t0 = now();
        my $lock = Tokenlock->acquire($L, wait => 20, lease => 60);
        push @took, now() - $t0;
        $lock->release;
        until_true(sub { scalar(shares_in($L)) >= 2 }, 10);
    }
    spit($stop, '');
    reap($_) for @loopers;
    my $bound = 2 * $HOLD + 0.05;
    diag(sprintf('a writer among 4 readers holding %.0f ms each got in after %s ms (the last polling; bound %.0f ms)',
        $HOLD * 1000, join(', ', map { sprintf '%.1f', $_ * 1000 } @took), $bound * 1000));
    cmp_ok((sort { $b <=> $a } @took)[0], '<=', $bound, 'within two holds plus one poll, every time');
    is(token_of($L), 'lockfile', 'free at the end');
}

# --- a semaphore never admits more than its slots ----------------------------------------
{
    my $L = fresh();
    my $in = "$dir/in-slots";
    mkdir $in or die;
    my ($SLOTS, $PROCS, $ROUNDS) = (3, 6, 15);
    my @kids;
    for my $k (1 .. $PROCS) {
        pipe(my $r, my $w) or die $!;
        push @kids, [fork_worker(sub {
            close $r;
            my ($max, $done) = (0, 0);
            for (1 .. $ROUNDS) {
                my $lock = Tokenlock->acquire($L, slots => $SLOTS, wait => 60, lease => 60);
                spit("$in/$$", '');
                my $inside = entries($in);
                $max = $inside if $inside > $max;
                select(undef, undef, undef, 0.003);
                unlink "$in/$$";
                $lock->release;
                $done++;
            }
            syswrite $w, "$max $done\n";
        }), $r];
        close $w;
    }
    my @got = map { [split ' ', read_line($_->[1])] } @kids;
    my @st = map { reap($_->[0]) } @kids;
    my ($max) = sort { $b <=> $a } map { $_->[0] } @got;
    my $done = 0;
    $done += $_->[1] for @got;
    diag("a semaphore of $SLOTS, $PROCS processes: at most $max inside at once, $done holds");
    cmp_ok($max, '<=', $SLOTS, "never more than $SLOTS inside at once");
    is($done, $PROCS * $ROUNDS, 'every hold was had');
    is_deeply(\@st, [(0) x $PROCS], 'without an error');
    is(token_of($L), 'lockfile', 'free at the end, no entry left') && is_deeply([shares_in($L)], [], 'no entry left');
}

# --- kill -9 --------------------------------------------------------------------------
for my $case (['a lone share', 1], ['a group of two shares', 2]) {
    my ($what, $count) = @$case;
    my $L = fresh();
    pipe(my $r, my $w) or die $!;
    my $pid = fork_worker(sub {
        close $r;
        my @l = map { Tokenlock->acquire($L, shared => 1, lease => 3600) } 1 .. $count;
        syswrite $w, "held\n";
        sleep 60;
    });
    close $w;
    is(read_line($r), 'held', "$what: held by a child");
    kill 'KILL', $pid;
    reap($pid);
    my $lock = Tokenlock->try_acquire($L, wait => 0);
    ok($lock, "$what of a reader killed with kill -9: a writer takes the lock at once (one try), its lease of an hour notwithstanding");
    is_deeply([shares_in($L)], [], 'the dead reader\'s entries are cleared');
    $lock->release if $lock;
}

{
    my $L = fresh();
    my $mine = Tokenlock->acquire($L, shared => 1);
    pipe(my $r, my $w) or die $!;
    my $pid = fork_worker(sub {
        close $r;
        my $l = Tokenlock->acquire($L, shared => 1, lease => 3600);
        syswrite $w, "held\n";
        sleep 60;
    });
    close $w;
    is(read_line($r), 'held', 'a child joins the share');
    kill 'KILL', $pid;
    reap($pid);
    is(scalar(shares_in($L)), 2, 'killed, its entry is still there');
    $mine->release;
    is(token_of($L), 'lockfile', 'the last live one out frees the lock');
    is_deeply([shares_in($L)], [], 'and removes the dead reader\'s entry');
}

# --- the writer's mark: taken off when the wait ends, or by a reader when the writer died ---
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1);
    my $t0 = now();
    my $ok = eval { Tokenlock->acquire($L, wait => 0.2) };
    is(ref $@ && $@->code, 'timed_out', 'a writer that waits in vain: timed_out');
    cmp_ok(now() - $t0, '<', 2, 'at its deadline');
    like(token_of($L), qr/\.11000000[0-9]{12}\./, 'its mark is taken off: a group cover again');
    my $b = Tokenlock->acquire($L, shared => 1, wait => 0);
    ok($b, 'and readers join again');
    $_->release for $a, $b;
    is(token_of($L), 'lockfile', 'free after them');
}

{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1);
    my $pid = fork_worker(sub { Tokenlock->acquire($L, wait => 60) });
    ok(until_true(sub { token_of($L) =~ /\.12000000[0-9]{12}\./ }, 10), 'a writer marked the lock');
    kill 'KILL', $pid;
    reap($pid);
    my $b = eval { Tokenlock->acquire($L, shared => 1, wait => 0) };
    ok($b, 'its writer killed, a reader unmarks the cover and joins (one try)') or diag($@);
    like(token_of($L), qr/\.11000000[0-9]{12}\./, 'a group cover again');
    $a->release;
    $b->release if $b;
    is(token_of($L), 'lockfile', 'free after them');
}

# --- leases that end -------------------------------------------------------------------
# A slot holder whose lease ended lost its slot to a joiner: its refresh
# counts the others first, and ends its share instead of making N + 1.
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, slots => 2, lease => 0.2);
    my $b = Tokenlock->acquire($L, slots => 2, lease => 60);
    ok(until_true(sub { grep { $_->{stale} } Tokenlock::holders($L) }, 5), 'a slot holder\'s lease ends (and the skew allowance)');
    my $c = Tokenlock->acquire($L, slots => 2, wait => 0, lease => 60);
    ok($c, 'a joiner counts it out and takes its slot');
    my $ok = eval { $a->refresh(lease => 60); 1 };
    is(!$ok && ref $@ && $@->code, 'lock_lost', 'the late refresh finds the semaphore full: lock_lost');
    ok(!$a->held, 'the object holds no more');
    my @live = grep { !$_->{stale} } Tokenlock::holders($L);
    is(scalar @live, 2, 'two live holders, never three');
    ok(!(grep { $_->{token} eq $a->token } Tokenlock::holders($L)), 'the refresh left no entry of its own');
    $b->release;
    $c->release;
    is(token_of($L), 'lockfile', 'the last one out frees the lock, the stale entry removed');
    is_deeply([shares_in($L)], [], 'no entry left');
}

# A lone share whose lease ended is taken over like a token: its release
# is lock_lost, and the taker is left alone.
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1, lease => 0.2);
    ok(until_true(sub { my ($h) = Tokenlock::holders($L); $h && $h->{stale} }, 5), 'a lone share\'s lease ends');
    my $w = Tokenlock->acquire($L, wait => 0);
    ok($w, 'a writer takes it over');
    my $ok = eval { $a->release; 1 };
    is(!$ok && ref $@ && $@->code, 'lock_lost', 'the late release: lock_lost');
    is(token_of($L), $w->token, 'the writer\'s token untouched');
    $w->release;
}

# A reader takes a stale lone share over to a lone share of its own, and
# joins a cover whose entries all ended.
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1, lease => 0.2);
    ok(until_true(sub { my ($h) = Tokenlock::holders($L); $h && $h->{stale} }, 5), 'a lone share\'s lease ends');
    my $r = Tokenlock->acquire($L, shared => 1, wait => 0);
    like(token_of($L), qr/\.10000000[0-9]{12}\./, 'a reader takes it over: a lone share of its own');
    is($r->token, token_of($L), 'named as the reader\'s');
    is(eval { $a->release; 1 } ? 'ok' : $@->code, 'lock_lost', 'the late holder\'s release: lock_lost');
    $r->release;
    my $b = Tokenlock->acquire($L, shared => 1, lease => 0.2);
    my $c = Tokenlock->acquire($L, shared => 1, lease => 0.2);
    ok(until_true(sub { !grep { !$_->{stale} } Tokenlock::holders($L) }, 5), 'both shares of a cover end');
    my $d = Tokenlock->acquire($L, shared => 1, wait => 0);
    is(scalar(grep { !$_->{stale} } Tokenlock::holders($L)), 1, 'a reader joins the cover: one live share');
    $d->release;
    is(token_of($L), 'lockfile', 'its leaving frees the lock');
    is_deeply([shares_in($L)], [], 'with the ended entries removed');
    is(eval { $_->release; 1 } ? 'ok' : $@->code, 'lock_lost', 'an ended member\'s release: lock_lost') for $b, $c;
    is(token_of($L), 'lockfile', 'and touches nothing');
}

# A writer that waits long keeps its mark a third of its lease ahead.
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1, lease => 60);
    my $b = Tokenlock->acquire($L, shared => 1, lease => 60);
    my $pid = fork_worker(sub { Tokenlock->acquire($L, wait => 60, lease => 0.3) });
    my %seen;
    ok(until_true(sub { my $t = token_of($L); $seen{$t} = 1 if $t =~ /\.12000000[0-9]{12}\./; keys %seen >= 3 }, 10),
        'the waiting writer renames its mark to a later expiry, again and again');
    my ($first) = sort keys %seen;
    my ($first_e) = $first =~ /\Alockfile\.([0-9]+)\./;
    my ($now_e) = token_of($L) =~ /\Alockfile\.([0-9]+)\./;
    cmp_ok($now_e, '>', $first_e, 'its expiry rises');
    $a->release;
    $b->release;
    is(reap($pid), 0, 'and the writer gets the lock once the readers are gone');
}

done_testing();
