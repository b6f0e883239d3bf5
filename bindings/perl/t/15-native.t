#!/usr/bin/perl
# The native lock against the tokenlock command: each excludes the other,
# each takes over the other's abandoned tokens by their exact name, and
# the judgements of docs/protocol.md (leases, dead owners, reused pids,
# zombies, legacy tokens, odd entries, untrusted directories) agree.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use POSIX ();
use TokenlockTest;

use Tokenlock;

my $cmd = tokenlock_command();
my $dir = scratch_dir();
my $n   = 0;
sub fresh { return "$dir/l" . ++$n . '.lock' }

sub code_of { my ($code) = @_; my $ok = eval { $code->(); 1 }; return $ok ? 'ok' : ref $@ ? $@->code : "died: $@" }

sub now_us { require Time::HiRes; my ($s, $us) = Time::HiRes::gettimeofday(); return $s * 1_000_000 + $us }

my $host_tag;
{
    my $L = fresh();
    my $lock = Tokenlock->acquire($L);
    ($host_tag) = $lock->token =~ /\Alockfile\.\d+\.([^.]+)\./;
    $lock->release;
}

# --- the host tag and token are those of the library ---------------------------
SKIP: {
    skip(command_skip('comparing the host tag with the command\'s'), 4) unless $cmd;
    my $L = fresh();
    my ($st, $out, $err) = capture([$cmd, 'acquire', '-n', $L]);
    is($st, 0, 'the command acquires a lock the module made') or diag($err);
    chomp $out;
    like($out, token_re(), 'a token');
    my ($cmd_tag) = $out =~ /\Alockfile\.\d+\.([^.]+)\./;
    is($host_tag, $cmd_tag, 'the module\'s host tag is the library\'s (FNV-1a of boot id, pid namespace, host name)');
    ($st) = capture([$cmd, 'release', $L, $out]);
    is($st, 0, 'released by the command');
}

# --- native holder: the command is excluded --------------------------------------
SKIP: {
    skip(command_skip('the command excluded by a native holder'), 8) unless $cmd;
    my $L = fresh();
    my $lock = Tokenlock->acquire($L, wait => 0);
    like($lock->token, token_re(), 'the module holds a token');
    my ($st, $out, $err) = capture([$cmd, 'run', '-n', $L, 'true']);
    is($st >> 8, 1, 'tokenlock run -n exits 1 while the module holds the lock');
    ($st, $out, $err) = capture([$cmd, 'acquire', '-n', $L]);
    is($st >> 8, 1, 'tokenlock acquire -n exits 1 too');
    like($err, qr/held by pid $$ on this host/, 'naming this process as the holder');
    my $s = lock_status($L);
    is($s->{token}, $lock->token, 'tokenlock status sees our token');
    is($s->{owner}, 'alive', 'with a live owner');
    $lock->release;
    is(lock_status($L)->{state}, 'free', 'released: free for the command');
    ($st) = capture([$cmd, 'run', '-n', $L, 'true']);
    is($st, 0, 'and tokenlock run gets it');
}

# --- command holder: the module is excluded ---------------------------------------
SKIP: {
    skip(command_skip('a holder through the command'), 7) unless $cmd;
    my $L = fresh();
    # The command gives the lock to its caller, this process, which lives.
    my ($st, $token) = capture([$cmd, 'acquire', '-n', $L]);
    chomp $token;
    is($st, 0, 'tokenlock acquire holds the lock for this process');
    is(Tokenlock->try_acquire($L), undef, 'the module\'s try-lock fails');
    my $ok = eval { Tokenlock->acquire($L, wait => 0.05); 1 };
    is($ok ? 'acquired' : $@->code, 'timed_out', 'a wait times out');
    like($@->message, qr/timed out after 50 ms; the lock is held by pid $$ on this host until /, 'naming the holder');
    # Beside the token, the turnstile the wait lined up in (docs/waiting-turnstile.md).
    is_deeply([entries($L)], [$token, 'turnstile'], 'the command\'s token is untouched');
    ($st) = capture([$cmd, 'release', $L, $token]);
    is($st, 0, 'the command releases');
    ok(Tokenlock->try_acquire($L), 'then the module gets it');
}

# --- a dead owner's token is taken over by its exact name -------------------------
{
    my $L = fresh();
    pipe(my $r, my $w) or die;
    my $child = fork_worker(sub {
        close $r;
        # Owned by this child, which then dies: by the command when there
        # is one, else natively, ending without its destructors.
        if (!$cmd) {
            my $lock = Tokenlock->acquire($L, wait => 0);
            print {$w} $lock->token, "\n";
            close $w;
            POSIX::_exit(0);
        }
        my ($st, $out, $err) = capture([$cmd, 'acquire', '--pid', $$, '-n', $L]);
        die "acquire: $err" if $st;
        print {$w} $out;
        close $w;
    });
    close $w;
    my $dead = read_line($r);
    is(reap($child), 0, 'a child took the lock with the command and died');
    like($dead, token_re(), 'leaving its token');
    mkdir "$L/$dead/w";
    spit("$L/$dead/w/.x.tmp.1", 'half');
    spit("$dir/outside", 'keep');
    symlink("$dir/outside", "$L/$dead/link") or die;
    symlink($dir, "$L/$dead/dirlink") or die;
    my $lock = Tokenlock->acquire($L, wait => 0);
    ok($lock, 'the module takes over the dead owner\'s token at once');
    is_deeply([entries($L)], [$lock->token], 'by renaming that name: one token, ours');
    is_deeply([entries("$L/" . $lock->token)], [], 'the workspace was cleared');
    is(slurp("$dir/outside"), 'keep', 'without following a symbolic link in it');
    ok(-d $dir && -e "$dir/outside", 'neither to a file nor to a directory');
    $lock->release;
}

# --- judgements on planted tokens ------------------------------------------------
sub plant {
    my ($L, $name) = @_;
    mkdir $L unless -d $L;
    chmod 0755, $L;
    mkdir "$L/$name" or die "plant $name: $!";
    return $name;
}

{
    my $now = now_us();
    my $ended = $now - 5_000_000;
    # A zombie: a child that exited and was not reaped.
    my $zpid = fork;
    POSIX::_exit(0) unless $zpid;
    my ($zstate, $zstart);
    for (1 .. 2000) {
        my $line = slurp("/proc/$zpid/stat");
        ($zstate, $zstart) = (split ' ', substr($line, rindex($line, ')') + 1))[0, 19];
        last if $zstate eq 'Z';
        select(undef, undef, undef, 0.005);
    }
    my $my_start = (split ' ', substr(slurp("/proc/$$/stat"), rindex(slurp("/proc/$$/stat"), ')') + 1))[19];
    my $later = $now + 600_000_000;
    my @cases = (
        ['a lease that ended on another host', "lockfile.$ended.elsewhere-0badc0de.1.0.0123456789abcdef", 'ok'],
        ['a live lease on another host', "lockfile.$later.elsewhere-0badc0de.1.0.0123456789abcdef", 'busy'],
        ['a lease beyond 24 hours', 'lockfile.' . ($now + 90_000_000_000) . '.elsewhere-0badc0de.1.0.0123456789abcdef', 'ok'],
        ['a live owner here', "lockfile.$later.$host_tag.$$.$my_start.0123456789abcdef", 'busy'],
        ['a reused pid (another start time)', "lockfile.$later.$host_tag.$$." . ($my_start + 1) . '.0123456789abcdef', 'ok'],
        ['a zombie owner', "lockfile.$later.$host_tag.$zpid.$zstart.0123456789abcdef", 'ok'],
        ['a legacy token 30 s old', 'lockfile' . (int($now / 1e6) - 30), 'busy'],
        ['a legacy token 120 s old', 'lockfile' . (int($now / 1e6) - 120), 'ok'],
    );
    for my $c (@cases) {
        my ($what, $name, $want) = @$c;
        my $L = fresh();
        plant($L, $name);
        my $got;
        my $lock = eval { Tokenlock->acquire($L, wait => 0) };
        $got = $lock ? 'ok' : $@->code;
        is($got, $want, "$what: " . ($want eq 'ok' ? 'taken over' : 'held'));
        if ($lock) {
            is_deeply([entries($L)], [$lock->token], "$what: by its exact name");
            $lock->release;
            # The command agrees it is free now.
            is(lock_status($L)->{state}, 'free', "$what: released");
        }
        else {
            is_deeply([entries($L)], [$name], "$what: left as it was");
            ok(!free_now($L), "$what: another process (the command if there is one) judges it held too");
        }
    }
    waitpid($zpid, 0);
}

# --- odd entries and untrusted directories: nothing is touched ----------------------
{
    my @cases = (
        ['a malformed token', sub { plant($_[0], 'lockfile.12.x.1.0.0') }, 'lock_corrupt'],
        ['two held tokens', sub { plant($_[0], 'lockfile.2.h-00000000.1.0.0123456789abcdef'); plant($_[0], 'lockfile.1.h-00000000.1.0.0123456789abcdef') }, 'lock_corrupt'],
        ['no token', sub { plant($_[0], 'stray') }, 'token_missing'],
        ['a world-writable directory', sub { plant($_[0], 'lockfile'); chmod 0777, $_[0] }, 'untrusted'],
        ['a group-writable directory', sub { plant($_[0], 'lockfile'); chmod 0775, $_[0] }, 'untrusted'],
        ['a symbolic link', sub { my $t = "$_[0].target"; plant($t, 'lockfile'); symlink($t, $_[0]) }, 'untrusted'],
    );
    for my $c (@cases) {
        my ($what, $setup, $want) = @$c;
        my $L = fresh();
        $setup->($L);
        my @before = entries($L);
        my $mode = (lstat $L)[2];
        is(code_of(sub { Tokenlock->acquire($L, wait => 0) }), $want, "$what: $want");
        like($@->message, qr/\Q$L\E/, "$what: the message names the directory") if ref $@;
        is_deeply([entries($L)], \@before, "$what: the entries are as they were");
        is((lstat $L)[2], $mode, "$what: so is the mode");
    }
}

# --- a directory judged before is judged again when it changes ------------------------
# The verdict is kept per directory and lstat: made world-writable by its
# owner, or removed and made again by another, it is refused at once.
{
    my $L = fresh();
    Tokenlock->acquire($L)->release;
    chmod 0777, $L or die "chmod $L: $!";
    my @before = entries($L);
    is(code_of(sub { Tokenlock->acquire($L, wait => 0) }), 'untrusted', 'made world-writable after a first use: untrusted');
    is_deeply([entries($L)], \@before, 'made world-writable after a first use: nothing was touched');
    chmod 0755, $L or die "chmod $L: $!";
    Tokenlock->acquire($L)->release;
    rmdir "$L/lockfile" or die "rmdir $L/lockfile: $!";
    rmdir $L or die "rmdir $L: $!";
    symlink(fresh(), $L) or die "symlink $L: $!";
    is(code_of(sub { Tokenlock->acquire($L, wait => 0) }), 'untrusted', 'replaced by a symbolic link after a first use: untrusted');
    ok(-l $L, 'replaced by a symbolic link after a first use: the link is left alone');
}

# --- lost at release and refresh -----------------------------------------------------
{
    my $L = fresh();
    my $lock = Tokenlock->acquire($L);
    my ($ok, $err) = break_token($L, $lock->token);
    ok($ok, 'our token is broken (tokenlock break --force)') or diag($err);
    my $other = Tokenlock->acquire($L, wait => 0);
    my $theirs = $other->token;
    is(code_of(sub { $lock->refresh }), 'lock_lost', 'refresh: lock_lost');
    is(code_of(sub { $lock->release }), 'not_owner', 'after which the object holds nothing');
    is_deeply([entries($L)], [$theirs], 'the new holder\'s token is untouched');
    $other->release;
}

# --- refresh renames the token, keeping its owner part ---------------------------------
{
    my $L = fresh();
    my $lock = Tokenlock->acquire($L, lease => 5);
    my $old = $lock->token;
    my $new = $lock->refresh(lease => 120);
    (my $owner_old = $old) =~ s/\Alockfile\.\d+\.//;
    (my $owner_new = $new) =~ s/\Alockfile\.\d+\.//;
    is($owner_new, $owner_old, 'the same owner part');
    isnt($new, $old, 'a new name');
    my ($exp) = $new =~ /\Alockfile\.(\d+)\./;
    cmp_ok($exp, '>', now_us() + 100_000_000, 'with the new lease');
    is_deeply([entries($L)], [$new], 'the only token');
    is(code_of(sub { $lock->refresh(lease => 86401) }), 'bad_argument', 'a lease beyond 24 hours is refused');
    is_deeply([entries($L)], [$new], 'and changes nothing');
    $lock->release;
}

# --- a forked child never releases its parent's lock --------------------------------
{
    my $L = fresh();
    my $lock = Tokenlock->acquire($L);
    my $token = $lock->token;
    pipe(my $r, my $w) or die;
    my $child = fork_worker(sub {
        close $r;
        my $c = eval { $lock->release; 1 } ? 'released' : $@->code;
        print {$w} "$c\n";
        close $w;
        undef $lock;    # DESTROY in the child
    });
    close $w;
    is(read_line($r), 'not_owner', 'release in a child: not_owner');
    is(reap($child), 0, 'the child ended (its DESTROY ran)');
    is_deeply([entries($L)], [$token], 'the parent\'s token is still there');
    ok($lock->held, 'and the parent still holds it');
    $lock->release;
}

# --- creating the lock directory: concurrent creators make one token ---------------------
{
    my $L = fresh();
    # A creator that died: its leftover, named like a token of a dead process.
    my $leftover = "$L.init." . (now_us() - 10_000_000) . ".$host_tag.2147483646.0.0123456789abcdef";
    mkdir $leftover or die;
    mkdir "$leftover/lockfile" or die;
    pipe(my $go_r, my $go_w) or die;
    pipe(my $res_r, my $res_w) or die;
    my @kids;
    for (1 .. 6) {
        push @kids, fork_worker(sub {
            close $go_w;
            close $res_r;
            read_line($go_r);
            my $lock = Tokenlock->acquire($L, wait => 10);
            my $t = $lock->token;
            # The waiters' turnstile (D/turnstile) is there once one of the
            # six had to wait: it is no token.
            my @e = grep { $_ ne 'turnstile' } entries($L);
            $lock->release;
            print {$res_w} (@e == 1 && $e[0] eq $t ? "alone\n" : "with @e\n");
            close $res_w;
        });
    }
    close $go_r;
    close $res_w;
    close $go_w;    # every child starts now
    my @seen = map { read_line($res_r) } 1 .. 6;
    is_deeply(\@seen, [('alone') x 6], 'six creators at once: each held the one token alone');
    is(reap($_), 0, 'a creator ended well') for @kids;
    is_deeply([grep { $_ ne 'turnstile' } entries($L)], ['lockfile'], 'one free token');
    opendir(my $dh, $dir) or die;
    my @init = grep { /\Q.init.\E/ } readdir $dh;
    is_deeply(\@init, [], 'no creation directory is left, the dead creator\'s included');
    is(sprintf('%04o', (stat $L)[2] & 07777), '0755', 'the lock directory has mode 0755 whatever the umask');
    ok(free_now($L), 'another process (the command if there is one) uses the directory the module made');
}

{
    my $L = "$dir/missing/parent.lock";
    is(code_of(sub { Tokenlock->acquire($L, wait => 0) }), 'system', 'a missing parent: system');
    is($@->errno, POSIX::ENOENT(), 'ENOENT');
    like($@->message, qr/must exist/, 'the message says the parent must exist');
}

# --- module and command take turns on one counter ---------------------------------------
SKIP: {
    skip(command_skip('module and command on one counter'), 7) unless $cmd;
    my $L = fresh();
    my $count = "$dir/count";
    spit($count, "0\n");
    my $bump = sub { my $v = slurp($count); spit("$count.new", ($v + 1) . "\n"); rename "$count.new", $count or die };
    my @kids;
    for my $k (1 .. 3) {
        push @kids, fork_worker(sub { Tokenlock::with_lock($L, $bump, wait => 30) for 1 .. 40 });
        push @kids, fork_worker(sub {
            for (1 .. 15) {
                my ($st, undef, $err) = capture([$cmd, 'run', '-w', '30', $L, $^X, '-e',
                    'open my $f, "<", $ARGV[0] or die; my $v = <$f>; close $f; '
                      . 'open my $g, ">", "$ARGV[0].new" or die; print $g $v + 1, "\n"; close $g; '
                      . 'rename "$ARGV[0].new", $ARGV[0] or die', $count]);
                die "run: $err" if $st;
            }
        });
    }
    is(reap($_), 0, 'a worker ended well') for @kids;
    is(slurp($count), 3 * 40 + 3 * 15 . "\n", 'module and command together lose no increment');
}

# --- group sharing, chosen as the command chooses it ------------------------------------
{
    my $L = fresh();
    {
        local $ENV{TOKENLOCK_DIR_MODE} = '0775';
        my $lock = Tokenlock->acquire($L);
        is(sprintf('%04o', (stat $L)[2] & 07777), '0775', 'TOKENLOCK_DIR_MODE=0775: the lock directory is made 0775');
        $lock->release;
        ok(Tokenlock->try_acquire($L), 'and a group-writable lock directory of our group is used');
        ok(free_now($L, TOKENLOCK_DIR_MODE => '0775'), 'as another process (the command if there is one) uses it');
    }
    is(code_of(sub { Tokenlock->acquire($L, wait => 0) }), 'untrusted', 'without group sharing it is refused');
    like($@->message, qr/which is not the group chosen for sharing.*TOKENLOCK_GROUP=/, 'saying why, and how to name the group')
      if ref $@;
    for my $bad ('0777', '0600', 'rwx', '01775') {
        local $ENV{TOKENLOCK_DIR_MODE} = $bad;
        my $M = fresh();
        is(code_of(sub { Tokenlock->acquire($M, wait => 0) }), 'bad_argument', "TOKENLOCK_DIR_MODE=$bad: bad_argument");
        ok(!-e $M, 'and nothing was made');
        opendir(my $dh, $dir) or die;
        is_deeply([grep { /\Q.init.\E/ } readdir $dh], [], 'not even a creation directory');
    }
}

done_testing();
