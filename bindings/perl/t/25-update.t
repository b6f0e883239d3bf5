#!/usr/bin/perl
# update_file: read-modify-write under the lock, committed through the
# token; every failure leaves the file as it was and no temporary file.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;
use Tokenlock qw(update_file);

my $cmd = tokenlock_command();
my $dir = scratch_dir();
sub code_of { my ($code) = @_; my $ok = eval { $code->(); 1 }; return $ok ? 'ok' : ref $@ ? $@->code : "died: $@" }

{
    my $f = "$dir/new.txt";
    my $seen = 'not called';
    is(update_file($f, sub { $seen = defined $_[0] ? 'defined' : 'undef'; "first\n" }), "first\n", 'returns what it wrote');
    is($seen, 'undef', 'a missing file reaches the code as undef');
    is(slurp($f), "first\n", 'the file holds it');
    is(update_file($f, sub { "$_[0]second\n" }), "first\nsecond\n", 'the code gets the current contents');
    is(slurp($f), "first\nsecond\n", 'and its result replaces them');
    is_deeply([leftovers($dir, 'new.txt')], [], 'no temporary file beside it');
    ok(free_now("$f.lock"), 'the lock is free afterwards');
    is(update_file($f, sub { '' }), '', 'an empty result is written');
    is(-s $f, 0, 'the file is empty');
}

# --- failures: nothing written, nothing left, the lock released ----------------
for my $c (
    ['the code dies', sub { die "no thanks\n" }, "died: no thanks\n"],
    ['the code returns undef', sub { undef }, 'bad_argument'],
    ['the code returns wide characters', sub { "\x{263a}" }, 'bad_argument'],
) {
    my ($what, $code, $want) = @$c;
    my $f = "$dir/keep.txt";
    spit($f, "kept\n");
    is(code_of(sub { update_file($f, $code) }), $want, "$what: $want");
    is(slurp($f), "kept\n", "$what: the file is intact");
    is_deeply([leftovers($dir, 'keep.txt')], [], "$what: no temporary file");
    ok(free_now("$f.lock"), "$what: the lock was released");
}
{
    my $f = "$dir/keep.txt";
    is(code_of(sub { update_file($f, 'not code') }), 'bad_argument', 'not a code reference: bad_argument');
    is(code_of(sub { update_file($f, sub { 'x' }, mode => 0640) }), 'bad_argument', 'a numeric mode: bad_argument');
    is(code_of(sub { update_file($f, sub { 'x' }, colour => 1) }), 'bad_argument', 'an unknown option: bad_argument');
    is(slurp($f), "kept\n", 'the refused calls left the file intact');
}

# --- a lock taken over while the code ran: the commit is fenced off -------------
{
    my $f = "$dir/fenced.txt";
    spit($f, "before\n");
    my $theirs;
    my $code = code_of(sub {
        update_file($f, sub {
            my $l = "$f.lock";
            my ($tok) = grep { /\Alockfile\./ } entries($l);
            my ($broken, $err) = break_token($l, $tok);
            die "break failed: $err" unless $broken;
            # Another process now holds the lock and writes the file: the
            # command, or a native child without one.
            if ($cmd) {
                my ($st2, $out) = capture([$cmd, 'write', '--lock', $l, $f], stdin => "theirs\n");
                die "write failed: $st2" if $st2;
            }
            else {
                reap(fork_worker(sub { Tokenlock::write_file($f, "theirs\n", lock => $l, wait => 0) })) == 0
                  or die "write failed";
            }
            return "ours\n";
        });
    });
    is($code, 'lock_lost', 'a commit after a takeover: lock_lost');
    is(slurp($f), "theirs\n", 'the new owner\'s write is intact');
    is_deeply([leftovers($dir, 'fenced.txt')], [], 'no temporary file beside it');
    my @ws = map { entries("$f.lock/$_/w") } grep { /\Alockfile/ } entries("$f.lock");
    is_deeply([grep { /\.tmp\./ } @ws], [], 'none in the workspace either');
}

# --- concurrent updates lose nothing ------------------------------------------------
{
    my $f = "$dir/log.txt";
    my @pids = map { my $w = $_; fork_worker(sub {
        update_file($f, sub { (defined $_[0] ? $_[0] : '') . "$w.$_\n" }, wait => 60) for 1 .. 25;
    }) } 1 .. 4;
    is(reap($_), 0, "worker $_ ended cleanly") for @pids;
    my @lines = split /\n/, slurp($f);
    is(scalar @lines, 100, '4 workers x 25 updates: 100 lines');
    my %u = map { $_ => 1 } @lines;
    is(scalar keys %u, 100, 'all different: no update was lost or repeated');
}

done_testing();
