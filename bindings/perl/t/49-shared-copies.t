#!/usr/bin/perl
# Copies of a lone share (docs/protocol.md, A second shared holder joins a
# lone share: the conversion). A converter, and a writer that marks, make
# a copy of the lone holder's share named for them alone, and remove it
# whenever their rename fails. Played here: the lone holder leaves (and
# lives on) between a converter's mkdir and its rename, another reader
# takes the lock, a third converts it; the late converter's copy must not
# stay behind as a share of a live process with a live lease, which would
# keep writers out and fill a slot for the whole lease. Then churn on a
# semaphore, after which the lock is free with no entry left.
use strict;
use warnings;

# Every rename of the module goes through here, so that the test can act
# between a step's mkdir and its rename. Set before the module is compiled.
my ($HOOK, $TEST_PID);
BEGIN {
    $TEST_PID = $$;
    *CORE::GLOBAL::rename = sub ($$) {
        if ($HOOK && $$ == $TEST_PID) {
            my $hook = $HOOK;
            $hook->(@_);
        }
        return CORE::rename($_[0], $_[1]);
    };
}

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use POSIX ();
use Time::HiRes ();
use TokenlockTest;

use Tokenlock;

my $dir = scratch_dir();
my $n   = 0;

sub fresh { return "$dir/l" . ++$n . '.lock' }

sub token_of {
    my ($d) = @_;
    my @t = grep { /\Alockfile/ } entries($d);
    return @t == 1 ? $t[0] : "(@t)";
}

sub shares_in { my ($d) = @_; my @s = sort grep { /\As\./ } entries("$d/" . token_of($d)); return @s }

sub code_of { my ($code) = @_; my $ok = eval { $code->(); 1 }; return $ok ? 'ok' : ref $@ ? $@->code : "died: $@" }

# A child that holds the lock as %opts say and reports "held"; at the first
# byte through its gate it releases and reports "released", and it exits
# only at the second: a holder that left and lives on, whose pid a share
# left behind would name as alive.
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
        $lock->release;
        syswrite $w, "released\n";
        sysread($gr, $buf, 1);
    });
    close $w;
    close $gr;
    return { pid => $pid, r => $r, gate => $gw };
}

sub step { my ($h) = @_; syswrite $h->{gate}, 'x'; return read_line($h->{r}) }

sub finish {
    my (@h) = @_;
    for my $h (@h) {
        syswrite $h->{gate}, 'xx';
        close $h->{gate};
        reap($h->{pid});
    }
}

# Just before this process's rename of the lone share (to a group cover
# for a converter, to a draining cover for a writer): the lone holder
# leaves, another reader takes the lock, a third converts it.
sub play_before {
    my ($L, $kind, $h) = @_;
    my @late;
    $HOOK = sub {
        my (undef, $to) = @_;
        return unless $to =~ m{/lockfile\.[0-9]+\.[^/]+\.1${kind}000000[0-9]{12}\.[0-9a-f]{16}\z};
        undef $HOOK;
        is(step($h), 'released', 'played: the lone holder leaves between our mkdir and our rename');
        for (1 .. 2) {
            my $x = holder($L, shared => 1);
            is(read_line($x->{r}), 'held', 'played: another reader takes a share meanwhile');
            push @late, $x;
        }
    };
    return \@late;
}

# The entries named for process $pid.
sub entries_of { my ($L, $pid) = @_; return grep { /\As\.[0-9]+\.[^.]+\.$pid\./ } shares_in($L) }

# --- a converter that loses removes its copy ------------------------------------------
{
    my $L = fresh();
    my $h = holder($L, shared => 1);
    is(read_line($h->{r}), 'held', 'the lone holder holds');
    like(token_of($L), qr/\.10000000[0-9]{12}\./, 'a lone share');
    my $late = play_before($L, 1, $h);
    my $c = Tokenlock->acquire($L, shared => 1, wait => 10, lease => 60);
    ok(!$HOOK, 'the interleaving was played');
    ok($c->held, 'the converter that lost joined the group the others made');
    is_deeply([entries_of($L, $h->{pid})], [], 'no entry names the lone holder that left (alive, its lease live)');
    is(scalar(shares_in($L)), 3, 'three shares: the copy of the second reader\'s lone share, the third\'s, ours');
    is(join(',', sort map { $_->{pid} } Tokenlock::holders($L)), join(',', sort $$, map { $_->{pid} } @$late),
        'holders: the three that hold, and nobody else');
    $c->release;
    is(step($_), 'released', 'a reader leaves') for @$late;
    is(token_of($L), 'lockfile', 'the last one out frees the lock');
    is_deeply([shares_in($L)], [], 'with no entry left in it');
    is(code_of(sub { Tokenlock->acquire($L, wait => 0)->release }), 'ok', 'a writer gets in at once');
    finish($h, @$late);
}

# --- a writer whose mark fails removes its copy --------------------------------------
{
    my $L = fresh();
    my $h = holder($L, shared => 1);
    is(read_line($h->{r}), 'held', 'the lone holder holds');
    my $late = play_before($L, 2, $h);
    is(code_of(sub { Tokenlock->acquire($L, wait => 0.3, lease => 60) }), 'timed_out',
        'a writer that marked too late waits for the readers, and gives up');
    ok(!$HOOK, 'the interleaving was played');
    is_deeply([entries_of($L, $h->{pid})], [], 'no entry names the lone holder that left');
    is(scalar(shares_in($L)), 2, 'two shares: the two readers\'');
    like(token_of($L), qr/\.11000000[0-9]{12}\./, 'a group cover, unmarked by the writer that gave up');
    is(step($_), 'released', 'a reader leaves') for @$late;
    is(token_of($L), 'lockfile', 'the last one out frees the lock');
    is_deeply([shares_in($L)], [], 'with no entry left in it');
    is(code_of(sub { Tokenlock->acquire($L, wait => 0)->release }), 'ok', 'a writer gets in at once');
    finish($h, @$late);
}

# --- the lone holder whose name is gone: its copies are its share -------------------
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1, lease => 60);
    my $lone = $a->token;
    my ($e, $nonce) = $lone =~ /\Alockfile\.([0-9]+)\..*\.([0-9a-f]{16})\z/;
    my $b = Tokenlock->acquire($L, shared => 1, lease => 60);
    my ($copy) = grep { /\As\.$e\..*\.\Q${\ substr($nonce, 0, 8)}\E[0-9a-f]{8}\z/ } shares_in($L);
    ok($copy, 'the converter made a copy of the lone share');
    # A loser's copy not yet removed: another maker's half of the nonce.
    (my $second = $copy) =~ s/[0-9a-f]{8}\z/substr($copy, -8) eq '00000000' ? '00000001' : '00000000'/e;
    mkdir "$L/" . token_of($L) . "/$second" or die $!;
    is(scalar(grep { $_->{pid} == $$ } Tokenlock::holders($L)), 2, 'holders: the copies are one share, beside the joiner\'s');
    my $c = Tokenlock->acquire($L, shared => 1, lease => 60);
    $a->release;
    ok(!(grep { $_ eq $copy || $_ eq $second } shares_in($L)), 'the lone holder leaves by removing every copy');
    is(scalar(shares_in($L)), 2, 'the others\' entries stay');
    my $d = Tokenlock->acquire($L, shared => 1, lease => 60);
    $b->release;
    $c->release;
    $d->release;
    is(token_of($L), 'lockfile', 'free after all');
    is_deeply([shares_in($L)], [], 'with no entry left');

    # Refresh: an entry of its own, every copy removed.
    $a = Tokenlock->acquire($L, shared => 1, lease => 60);
    ($e, $nonce) = $a->token =~ /\Alockfile\.([0-9]+)\..*\.([0-9a-f]{16})\z/;
    $b = Tokenlock->acquire($L, shared => 1, lease => 60);
    ($copy) = grep { /\As\.$e\..*\.\Q${\ substr($nonce, 0, 8)}\E[0-9a-f]{8}\z/ } shares_in($L);
    ($second = $copy) =~ s/[0-9a-f]{8}\z/substr($copy, -8) eq '00000000' ? '00000001' : '00000000'/e;
    mkdir "$L/" . token_of($L) . "/$second" or die $!;
    my $t = $a->refresh(lease => 90);
    like($t, qr/\As\.[0-9]+\.[^.]+\.$$\.[0-9]+\.[0-9a-f]{16}\z/, 'the converted holder refreshes into an entry of its own');
    is_deeply([sort grep { $_ ne $b->token } shares_in($L)], [$t], 'every copy removed: only its entry and the joiner\'s');
    $a->release;
    $b->release;
    is(token_of($L), 'lockfile', 'free after both');
    is_deeply([shares_in($L)], [], 'with no entry left');
}

# Copies of one lone share count as one holder in a semaphore's count.
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, slots => 3, lease => 60);
    my ($e, $nonce) = $a->token =~ /\Alockfile\.([0-9]+)\..*\.([0-9a-f]{16})\z/;
    my $b = Tokenlock->acquire($L, slots => 3, lease => 60);
    my ($copy) = grep { /\As\.$e\..*\.\Q${\ substr($nonce, 0, 8)}\E[0-9a-f]{8}\z/ } shares_in($L);
    (my $second = $copy) =~ s/[0-9a-f]{8}\z/substr($copy, -8) eq '00000000' ? '00000001' : '00000000'/e;
    mkdir "$L/" . token_of($L) . "/$second" or die $!;
    my $c = eval { Tokenlock->acquire($L, slots => 3, wait => 0, lease => 60) };
    ok($c, 'a semaphore of 3 with two copies of one lone share and a member admits a third holder')
      or diag(ref $@ ? $@->message : $@);
    is(code_of(sub { Tokenlock->acquire($L, slots => 3, wait => 0) }), 'busy', 'and no fourth');
    $_->release for grep { $_ } $a, $b, $c;
    is(token_of($L), 'lockfile', 'free after all');
    is_deeply([shares_in($L)], [], 'with no entry left');
}

# --- churn: 5 processes on a semaphore of 2 -----------------------------------------
{
    my $L = fresh();
    my $in = "$dir/in-churn";
    mkdir $in or die;
    my $go = "$dir/churn-stop";
    my @kids;
    for my $k (1 .. 5) {
        pipe(my $r, my $w) or die $!;
        push @kids, [fork_worker(sub {
            close $r;
            my ($holds, $most) = (0, 0);
            until (-e $go) {
                my $lock = Tokenlock->acquire($L, slots => 2, wait => 10, lease => 30);
                spit("$in/$$", '');
                my $inside = () = entries($in);
                $most = $inside if $inside > $most;
                unlink "$in/$$";
                $lock->refresh(lease => 30) if $holds % 3 == 0;
                $lock->release;
                $holds++;
            }
            syswrite $w, "$holds $most\n";
        }), $r];
        close $w;
    }
    # The churn's length, not a wait for anything: the processes stop at
    # the file, whatever they are doing then.
    Time::HiRes::sleep(3);
    spit($go, '');
    my ($holds, $most) = (0, 0);
    for my $k (@kids) {
        my ($h, $m) = split ' ', read_line($k->[1]) // '0 99';
        $holds += $h;
        $most = $m if $m > $most;
        is(reap($k->[0]), 0, 'a churning process ended well');
    }
    ok($holds > 5, "holds were taken ($holds)");
    ok($most <= 2, "never more than 2 inside at once (at most $most)");
    is(token_of($L), 'lockfile', 'after the churn the lock is free') or diag(join ' ', token_of($L), shares_in($L));
    is_deeply([grep { /\As\./ } entries("$L/lockfile")], [], 'with no entry left in it');
    is(code_of(sub { Tokenlock->acquire($L, wait => 0)->release }), 'ok', 'and a writer gets in at once');
    diag("a semaphore of 2, 5 processes for 3 s: $holds holds, at most $most inside at once");
}

done_testing();
