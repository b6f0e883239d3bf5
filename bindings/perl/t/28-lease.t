#!/usr/bin/perl
# The lease rule as docs/protocol.md states it (Stale): a lock whose lease
# and skew allowance have ended is taken over, even from a holder that is
# alive and running on this host; that holder's release then dies with
# lock_lost and leaves the new holder's token alone. Before the end it is
# not taken over.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use Time::HiRes ();
use TokenlockTest;

use Tokenlock;

tokenlock_command();
my $dir = scratch_dir();
my $L   = "$dir/lease.lock";
my $SKEW_US = 1_000_000;

sub now_us { my ($s, $us) = Time::HiRes::gettimeofday(); return $s * 1_000_000 + $us }

pipe(my $held_r, my $held_w) or die $!;
pipe(my $go_r,   my $go_w)   or die $!;
pipe(my $res_r,  my $res_w)  or die $!;
my $holder = fork_worker(sub {
    close $_ for $held_r, $go_w, $res_r;
    my $lock = Tokenlock->acquire($L, lease => 2);
    syswrite $held_w, $lock->token . "\n";
    # Running, not stopped: it waits on the pipe until the parent took over.
    read_line($go_r);
    my $ok = eval { $lock->release; 1 };
    syswrite $res_w, ($ok ? 'released' : ref $@ ? $@->code . "\t" . $@->message : "died: $@") . "\n";
    syswrite $res_w, ($lock->held ? 'held' : 'not held') . "\n";
});
close $_ for $held_w, $go_r, $res_w;
my $token = read_line($held_r);
my ($expiry) = $token =~ /\Alockfile\.([0-9]+)\./;
ok($expiry, 'the holder took the lock with a lease of 2 s') or diag($token);

# Within the lease: busy, however often asked.
my $early = Tokenlock->try_acquire($L);
my $asked = now_us();
ok(!$early, 'within its lease the lock is not taken over') or $early->release;
cmp_ok($asked, '<', $expiry + $SKEW_US, '(asked before the lease and the skew allowance ended)');

# Waited for with a bound: taken over once the lease has ended.
my $taker = Tokenlock->acquire($L, wait => 10);
my $taken = now_us();
ok(kill(0, $holder), 'the holder is alive and running when its lock is taken over');
my $stat = slurp("/proc/$holder/stat");
my ($state) = $stat =~ /\) (\S)/;
like($state, qr/\A[RS]\z/, 'not stopped, not a zombie');
isnt($taker->token, $token, 'a new token');
cmp_ok($taken, '>', $expiry + $SKEW_US, 'taken over only after the lease and the skew allowance ended');
is(lock_status($L)->{token}, $taker->token, 'the lock holds the taker\'s token');

# The running holder then releases: lock_lost, and nothing of the taker's touched.
syswrite $go_w, "go\n";
close $go_w;
my ($code, $message) = split /\t/, read_line($res_r), 2;
is($code, 'lock_lost', 'the holder\'s release dies with lock_lost');
like($message, qr/\Q$L\E.*taken over.*lease ended/, 'naming the lock and the ended lease');
is(read_line($res_r), 'not held', 'the holder\'s object no longer holds the lock');
is(reap($holder), 0, 'the holder ended well');
# The taker waited in the turnstile (docs/waiting-turnstile.md), which stays.
sub tokens { grep { $_ ne 'turnstile' } entries($L) }
is(join(' ', tokens()), $taker->token, 'the taker\'s token is untouched');
ok($taker->release, 'and the taker releases it');
is(join(' ', tokens()), 'lockfile', 'free at the end');

done_testing();
