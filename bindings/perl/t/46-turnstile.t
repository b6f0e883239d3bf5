#!/usr/bin/perl
# The turnstile (docs/waiting-turnstile.md): native waiters take turns at
# D/turnstile. Contended, the lock passes through it fairly; whatever is
# planted at its name, or holds it, costs only latency: the waiter still
# gets a freed lock within a bound and gives up at its deadline, the
# planted entry is left as it was, and the lock is free afterwards.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;
use Fcntl qw(:flock :mode);
use POSIX ();
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

use Tokenlock;
use Tokenlock::Turnstile ();

my $dir = scratch_dir();
my $fs = Tokenlock::System::_fs_type($dir);
plan skip_all => "the turnstile is used on local filesystems only, and $dir is on " . ($fs // 'an unknown one')
  unless defined $fs && Tokenlock::Turnstile::_turnstile_usable({ dir => $dir });

sub now { clock_gettime(CLOCK_MONOTONIC) }

# Waits (bounded) until $pid sleeps, which a waiter only does inside its wait.
sub until_sleeping {
    my ($pid) = @_;
    my $give_up = now() + 10;
    while (now() < $give_up) {
        my $st = slurp("/proc/$pid/stat");
        return 1 if defined $st && $st =~ /\) S /;
        Time::HiRes::usleep(1000);
    }
    return 0;
}

# A forked waiter that reports when it starts, and then what its acquire
# came to: "got T" (monotonic seconds) or "err T KIND".
sub waiter {
    my ($lockdir, $wait, %o) = @_;
    pipe(my $r, my $w) or die $!;
    my $pid = fork_worker(sub {
        close $r;
        $w->autoflush(1);
        $o{setup}->() if $o{setup};
        print {$w} 'start ', now(), "\n";
        my $l = eval { Tokenlock->acquire($lockdir, wait => $wait, %{ $o{opt} || {} }) };
        my $t = now();
        if ($l) {
            print {$w} "got $t\n";
            $l->release;
        } else {
            my $kind = ref $@ ? $@->code : "die: $@";
            print {$w} "err $t $kind\n";
        }
    });
    close $w;
    my ($said, $t) = split ' ', (read_line($r) // '');
    is($said, 'start', 'the waiter started');
    return ($pid, $r, $t);
}

sub snapshot {
    my ($path) = @_;
    my @st = lstat $path or return 'missing';
    my $link = S_ISLNK($st[2]) ? readlink $path : '';
    my $data = S_ISREG($st[2]) && -r $path ? slurp($path) : '';
    return join ':', @st[0, 1, 2, 3, 4, 7, 9], $link, $data;
}

# --- Fairness: 8 processes on one lock for 4 s --------------------------
{
    my $L = "$dir/fair.lock";
    my $counter = "$dir/fair.count";
    spit($counter, "0\n");
    Tokenlock->acquire($L)->release;
    ok(!-e "$L/turnstile", 'an uncontended lock has no turnstile');
    my $n = 8;
    pipe(my $gate_r, my $gate_w) or die $!;
    my (@pids, @pipes);
    for my $i (1 .. $n) {
        pipe(my $r, my $w) or die $!;
        push @pids, fork_worker(sub {
            close $gate_w;
            close $r;
            my $buf;
            sysread($gate_r, $buf, 1);
            my ($ops, $end) = (0, now() + 4);
            while (now() < $end) {
                my $l = Tokenlock->acquire($L, wait => 30);
                my $v = slurp($counter);
                spit($counter, ($v + 1) . "\n");
                $l->release;
                $ops++;
            }
            syswrite($w, "$ops\n");
        });
        close $w;
        push @pipes, $r;
    }
    close $gate_r;
    close $gate_w;
    my @ops = map { read_line($_) // 0 } @pipes;
    is(reap($_), 0, "fair worker $_ ended well") for @pids;
    my $sum = 0;
    $sum += $_ for @ops;
    my $sq = 0;
    $sq += $_ * $_ for @ops;
    my $jain = $sq ? $sum * $sum / ($n * $sq) : 0;
    diag(sprintf 'turnstile, 8 processes, 4 s: %d operations (%s), Jain %.3f', $sum, join(' ', @ops), $jain);
    is(slurp($counter) + 0, $sum, 'the counter equals the operations counted');
    ok(!grep({ $_ == 0 } @ops), 'every process got turns');
    cmp_ok($sum, '>=', 400, 'enough operations to judge fairness');
    cmp_ok($jain, '>=', 0.8, "Jain's index of the 8 processes");
    my @st = lstat "$L/turnstile";
    ok(@st && S_ISREG($st[2]), 'the turnstile formed');
    is(sprintf('%04o', $st[2] & 07777), '0600', 'with mode 0600');
    is($st[7], 0, 'and no hungry mark once the line is gone');
    ok(free_now($L), 'the lock is free afterwards');
}

# --- Hostile entries at D/turnstile ---------------------------------------
my $victim = "$dir/victim";
spit($victim, "precious\n");
# Its content, inode and modification time: a hard link adds to its links.
sub victim { my @st = lstat $victim; return join ':', @st[1, 9], slurp($victim) }
my $victim_was = victim();
my $other = getpwnam('nobody');

my @cases = (
    [ 'a symbolic link to a victim file', sub { symlink($victim, $_[0]) or die $! } ],
    [ 'a dangling symbolic link', sub { symlink("$dir/nothing-here", $_[0]) or die $! } ],
    [ 'a FIFO', sub { POSIX::mkfifo($_[0], 0600) or die $! } ],
    [ 'a directory', sub { mkdir($_[0], 0700) or die $! } ],
    [ 'a hard link to a victim file', sub { link($victim, $_[0]) or die $! } ],
    [ 'a file of another user', sub { spit($_[0], ''); chmod 0600, $_[0]; chown($other, -1, $_[0]) or die $! },
      ($> == 0 && defined $other) ? undef : 'needs root and the user nobody' ],
    [ 'a turnstile flocked for ever by another process', \&hold_turnstile ],
    [ 'a hungry mark left by a head that died', sub { spit($_[0], 'x'); chmod 0600, $_[0] } ],
);

# A process that holds the turnstile's flock until the test ends.
my @holders;
sub hold_turnstile {
    my ($path) = @_;
    spit($path, '');
    chmod 0600, $path;
    pipe(my $r, my $w) or die $!;
    pipe(my $stop_r, my $stop_w) or die $!;
    push @holders, [fork_worker(sub {
        close $r;
        close $stop_w;
        open(my $fh, '+<', $path) or die "open $path: $!";
        flock($fh, LOCK_EX) or die "flock: $!";
        syswrite($w, "held\n");
        my $buf;
        sysread($stop_r, $buf, 1);
    }), $stop_w];
    close $w;
    close $stop_r;
    die 'the turnstile holder did not start' unless (read_line($r) // '') eq 'held';
}

my $k = 0;
for my $case (@cases) {
    my ($what, $plant, $skip) = @$case;
    SKIP: {
        skip("$what: $skip", 15) if defined $skip;
        my $L = "$dir/hostile" . ++$k . '.lock';
        my $held = Tokenlock->acquire($L);
        my $t = "$L/turnstile";
        $plant->($t);
        my $planted = snapshot($t);
        my ($pid, $r) = waiter($L, 5);
        ok(until_sleeping($pid), "$what: the waiter waits");
        my $released = now();
        $held->release;
        my ($how, $at) = split ' ', (read_line($r) // 'none 0');
        is($how, 'got', "$what: the waiter got the freed lock");
        my $after = ($at - $released) * 1000;
        cmp_ok($after, '<', 500, "$what: within 500 ms of its release");
        diag(sprintf '%s: taken %.1f ms after the release', $what, $after);
        is(reap($pid), 0, "$what: the waiter ended well");

        # A lock that is never released: the waiter gives up at its deadline.
        $held = Tokenlock->acquire($L);
        ($pid, $r, my $from) = waiter($L, 0.5);
        my ($how2, $at2, $kind) = split ' ', (read_line($r) // 'none 0 none');
        is("$how2 $kind", 'err timed_out', "$what: a waiter on a held lock times out");
        cmp_ok($at2 - $from, '>=', 0.5, "$what: not before its deadline");
        cmp_ok($at2 - $from, '<', 0.5 + 0.4, "$what: at its deadline");
        is(reap($pid), 0, "$what: that waiter ended well");
        $held->release;

        if ($what =~ /hungry/) {
            is((lstat $t)[7], 0, "$what: the next head cleared it");
        } else {
            is(snapshot($t), $planted, "$what: the planted entry is as it was");
        }
        is(victim(), $victim_was, "$what: the victim file is untouched");
        ok(!-e "$dir/nothing-here", "$what: nothing was created through a link");
        is(join(' ', entries($L)), 'lockfile turnstile', "$what: nothing else in the lock directory");
        ok(free_now($L), "$what: the lock is free afterwards");
    }
}
for my $h (@holders) {
    close $h->[1];
    is(reap($h->[0]), 0, 'the turnstile holder ended well');
}

# --- The mode, whatever the umask, and a group-shared lock ----------------
for my $g (undef, (split ' ', $))[0]) {
    my $L = "$dir/mode" . (defined $g ? 'g' : '') . '.lock';
    my %opt = defined $g ? (group => $g) : ();
    my $held = Tokenlock->acquire($L, %opt);
    my ($pid, $r) = waiter($L, 5, setup => sub { umask 0 }, opt => \%opt);
    # Each waiter that reaches the line opens the turnstile: it exists then.
    my $give_up = now() + 10;
    Time::HiRes::usleep(1000) while !-e "$L/turnstile" && now() < $give_up;
    $held->release;
    is((split ' ', read_line($r) // '')[0], 'got', 'the waiter got the lock');
    is(reap($pid), 0, 'the waiter ended well');
    my @st = lstat "$L/turnstile";
    my $want = defined $g ? '0660' : '0600';
    is(sprintf('%04o', ($st[2] // 0) & 07777), $want, 'the turnstile has mode ' . $want . ' under umask 0'
        . (defined $g ? ', shared with the group' : ''));
    is($st[5], $g, 'and the chosen group') if defined $g;
}

# --- A network filesystem: polling, no turnstile ---------------------------
{
    my $L = "$dir/nfs.lock";
    my $held = Tokenlock->acquire($L);
    my ($pid, $r) = waiter($L, 5, setup => sub { $Tokenlock::Turnstile::FS_TYPE{$L} = 'nfs4' });
    ok(until_sleeping($pid), 'nfs: the waiter waits');
    $held->release;
    is((split ' ', read_line($r) // '')[0], 'got', 'nfs: the polling waiter got the lock');
    is(reap($pid), 0, 'nfs: the waiter ended well');
    ok(!-e "$L/turnstile", 'nfs: no turnstile was made');
}

done_testing();
