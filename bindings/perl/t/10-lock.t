#!/usr/bin/perl
# The lock object: acquire, token, release, busy and timed out between
# processes, refresh, and a lock taken over behind its holder's back.
use strict;
use POSIX ();
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

use Tokenlock;

my $cmd = tokenlock_command();
my $dir = scratch_dir();
my $L   = "$dir/a.lock";

# --- acquire, the token, release -------------------------------------------
{
    my $lock = Tokenlock->acquire($L, wait => 5);
    isa_ok($lock, 'Tokenlock');
    my ($pid) = $lock->token =~ token_re();
    ok(defined $pid, 'the token follows the token grammar') or diag($lock->token);
    is($pid, $$, 'and names this process as its owner (acquire --pid $$)');
    ok(-d "$L/" . $lock->token, 'the token directory is in the lock directory');
    is($lock->lockdir, $L, 'lockdir');
    ok($lock->held, 'held');
    my $st = lock_status($L);
    is($st->{state}, 'held', 'tokenlock status: held');
    is($st->{token}, $lock->token, 'by this token');
    is($st->{owner}, 'alive', 'by a live owner');

    ok($lock->release, 'release');
    ok(!$lock->held, 'not held after release');
    is(lock_status($L)->{state}, 'free', 'tokenlock status: free');
    my $ok = eval { $lock->release; 1 };
    ok(!$ok, 'a second release fails');
    is($@->code, 'not_owner', 'with not_owner') or diag($@);
    like($@->message, qr/\ATokenlock: release \Q$L\E: this lock object no longer holds the lock/, 'saying so');
    ok(!eval { $lock->refresh; 1 } && $@->code eq 'not_owner', 'refresh after release: not_owner');
}

# --- a second process meets busy / timed_out, then gets it --------------------
{
    pipe(my $held_r, my $held_w) or die $!;
    pipe(my $go_r,   my $go_w)   or die $!;
    pipe(my $done_r, my $done_w) or die $!;
    my $holder = fork_worker(sub {
        close $_ for $held_r, $go_w, $done_r;
        my $lock = Tokenlock->acquire($L, wait => 5);
        syswrite $held_w, $lock->token . "\n";
        read_line($go_r);    # until the parent has tried
        $lock->release;
        syswrite $done_w, "released\n";
    });
    close $_ for $held_w, $go_r, $done_w;
    my $token = read_line($held_r);
    like($token, token_re(), 'the holder has the lock');

    my $ok = eval { Tokenlock->acquire($L, wait => 0); 1 };
    my $err = $@;
    ok(!$ok, 'wait => 0 while another process holds it fails');
    is($err->code,   'busy', 'with busy');
    is($err->status, 1,      'exit status 1');
    like("$err", qr/\Atokenlock: acquire \Q$L\E: the lock is held by pid $holder /, 'stringifies to the message, naming the holder');
    like("$err", qr/\n\z/, 'ending in a newline');
    is($err->message . "\n", "$err", 'the message, then the newline');

    $ok = eval { Tokenlock->acquire($L, wait => 0.3); 1 };
    $err = $@;
    ok(!$ok, 'a wait of 0.3 s fails');
    is($err->code, 'timed_out', 'with timed_out, distinct from busy');
    like($err->message, qr/timed out after 300 ms/, 'the message says how long it waited');

    is(Tokenlock->try_acquire($L), undef, 'try_acquire returns undef while it is held');
    is(Tokenlock->try_acquire($L, wait => 0.1), undef, 'also after a wait');
    is(lock_status($L)->{token}, $token, 'none of it touched the holder\'s token');

    syswrite $go_w, "go\n";
    is(read_line($done_r), 'released', 'the holder released');
    my $lock = Tokenlock->try_acquire($L);
    ok($lock, 'after the release try_acquire gets it');
    isnt($lock->token, $token, 'with a token of its own');
    $lock->release;
    is(reap($holder), 0, 'the holder ended well');
}

# --- a waiter gets the lock only once it is released --------------------------
{
    my $lock = Tokenlock->acquire($L);
    my $marker = "$dir/marker";
    TokenlockTest::spit($marker, "held\n");
    pipe(my $ready_r, my $ready_w) or die $!;
    pipe(my $got_r,   my $got_w)   or die $!;
    my $waiter = fork_worker(sub {
        close $_ for $ready_r, $got_r;
        syswrite $ready_w, "ready\n";
        my $mine = Tokenlock->acquire($L, wait => 60);
        # What the holder wrote last before releasing.
        syswrite $got_w, TokenlockTest::slurp($marker);
        $mine->release;
    });
    close $_ for $ready_w, $got_w;
    is(read_line($ready_r), 'ready', 'the waiter is starting to wait');
    TokenlockTest::spit($marker, "released\n");
    $lock->release;
    is(read_line($got_r), 'released', 'the waiter got the lock, and only after the release');
    is(reap($waiter), 0, 'the waiter ended well');
}

# --- refresh ------------------------------------------------------------------
{
    my $lock = Tokenlock->acquire($L, lease => 60);
    my $old = $lock->token;
    my ($exp_old) = $old =~ /\Alockfile\.(\d+)\./;
    my $new = $lock->refresh(lease => 600);
    like($new, token_re(), 'refresh returns a token');
    isnt($new, $old, 'a new one');
    is($lock->token, $new, 'which the object now holds');
    my ($exp_new) = $new =~ /\Alockfile\.(\d+)\./;
    cmp_ok($exp_new - $exp_old, '>', 500e6, 'its expiry is about 540 s later');
    is(lock_status($L)->{token}, $new, 'the lock holds the new token');
    ok(eval { $lock->release; 1 }, 'release with the new token') or diag($@);

    for my $bad ('-1', 'abc', '0') {
        ok(!eval { Tokenlock->acquire($L, lease => $bad); 1 } && $@->code eq 'bad_argument', "lease => '$bad' is a usage error");
    }
    ok(!eval { Tokenlock->acquire($L, wait => 'soon'); 1 } && $@->code eq 'bad_argument', 'a bad wait is a usage error');
    ok(!eval { Tokenlock->acquire($L, wiat => 1); 1 } && $@->message =~ /unknown option 'wiat'/, 'an unknown option is refused');
    is(lock_status($L)->{state}, 'free', 'none of them took the lock');
}

# --- taken over behind the holder's back: lock_lost ---------------------------
sub break_force {
    my ($lockdir, $token) = @_;
    my ($ok, $err) = break_token($lockdir, $token);
    ok($ok, 'the token is broken (tokenlock break --force)') or diag($err);
}

{
    my $lock = Tokenlock->acquire($L);
    break_force($L, $lock->token);
    my @warnings;
    local $SIG{__WARN__} = sub { push @warnings, @_ };
    my $ok = eval { $lock->refresh; 1 };
    my $err = $@;
    ok(!$ok, 'refresh after the takeover fails');
    is($err->code,   'lock_lost', 'with lock_lost');
    is($err->status, 3,           'exit status 3');
    like($err->message, qr/\Q$L\E.*does not hold/, 'the message names the lock and the cause');
    ok(!$lock->held, 'the object no longer holds the lock');
    undef $lock;
    no_warnings(\@warnings, 'and lets go of it quietly');

    my $other = Tokenlock->try_acquire($L);
    ok($other, 'the lock itself is free again');
    $other->release if $other;

    $lock = Tokenlock->acquire($L);
    break_force($L, $lock->token);
    my $taker = Tokenlock->acquire($L, wait => 0);
    $ok = eval { $lock->release; 1 };
    ok(!$ok, 'release after a takeover fails');
    is($@->code, 'lock_lost', 'with lock_lost');
    is(lock_status($L)->{token}, $taker->token, 'and leaves the new holder\'s token alone');
    $taker->release;
}

sub no_warnings {
    my ($warnings, $name) = @_;
    is(scalar(@$warnings), 0, $name) or diag(@$warnings);
}

# --- a legacy token, as the older Perl rename lock leaves it --------------------
SKIP: {
    # A command there must know them too, as it shares these directories.
    my ($st, $help) = $cmd ? capture([$cmd, 'acquire', '--help']) : (0, '--legacy-timeout');
    skip('this tokenlock knows no legacy tokens', 9) unless $help =~ /--legacy-timeout/;
    my $LL = "$dir/legacy.lock";
    Tokenlock->acquire($LL)->release;
    my $legacy = 'lockfile' . (time - 30);
    rename("$LL/lockfile", "$LL/$legacy") or die "rename: $!";
    is(Tokenlock->try_acquire($LL), undef, 'a legacy token 30 s old is held (stale at 60 s)');
    ok(-d "$LL/$legacy", 'and left alone');
    my $ok = eval { Tokenlock->acquire($LL, wait => 0, legacy_timeout => 'x'); 1 };
    ok(!$ok && $@->code eq 'bad_argument', 'legacy_timeout must be a number of seconds');
    my $lock = Tokenlock->acquire($LL, wait => 0, legacy_timeout => 10);
    ok($lock, 'with legacy_timeout => 10 it is stale and taken over');
    like($lock->token, token_re(), 'by a token of ours');
    ok(!-e "$LL/$legacy", 'renamed away');
    $lock->release;
    ok(-d "$LL/lockfile", 'released as lockfile, which the older scripts take');

    my $c = "$dir/legacy.count";
    Tokenlock::increment($c, by => 0);    # makes the lock directory
    rename("$c.lock/lockfile", "$c.lock/lockfile" . (time - 30)) or die "rename: $!";
    $ok = eval { Tokenlock::increment($c, wait => 0); 1 };
    is($ok ? 'counted' : $@->code, 'busy', 'increment waits for a legacy holder too');
    is(Tokenlock::increment($c, wait => 0, legacy_timeout => 10), 1, 'and takes over a stale one with legacy_timeout');
}

# --- odd lock paths -------------------------------------------------------------
{
    chdir $dir or die $!;
    my $lock = Tokenlock->acquire('-n');
    ok(-d "$dir/-n", 'a lock directory named like an option is a directory, not an option');
    $lock->release;
    my $ok = eval { Tokenlock->acquire("$dir/missing/parent.lock", wait => 0); 1 };
    is($ok ? 'acquired' : $@->code . ' ' . $@->errno, 'system ' . POSIX::ENOENT(), 'a missing parent: system, ENOENT');
    like($@->message, qr/\Q$dir\E\/missing\/parent\.lock/, 'naming the lock') if !$ok;
    chdir '/';
}

done_testing();
