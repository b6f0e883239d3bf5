#!/usr/bin/perl
# write_file and increment without the command: the atomic write beside
# the target, and the update committed through the lock's token (the fence
# of docs/protocol.md). Every failure leaves the target as it was and no
# temporary file behind.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use POSIX ();
use TokenlockTest;

use Tokenlock qw(write_file update_file increment);

my $cmd = tokenlock_command();
my $dir = scratch_dir();

sub err_of { my ($code) = @_; my $ok = eval { $code->(); 1 }; return $ok ? 'ok' : ref $@ ? $@->code . ($@->errno ? ' ' . $@->errno : '') : "died: $@" }

# --- the fenced commit goes through the token's workspace ----------------------------
{
    my $d = "$dir/fenced";
    mkdir $d or die;
    my $c = "$d/n.count";
    is(increment($c), 1, 'a first increment');
    is(increment($c, by => 41), 42, 'by 41');
    is(slurp($c), "42\n", 'the file holds the value');
    ok(-d "$c.lock/lockfile/w", 'the workspace w moved with the token back to lockfile');
    is_deeply([temps($d)], [], 'no temporary file anywhere');
    SKIP: {
        skip(command_skip('counting on with the command'), 2) unless $cmd;
        my ($st, $out) = capture([$cmd, 'incr', $c]);
        is($out, "43\n", 'the command counts on from there, through the same lock');
        is(increment($c), 44, 'and the module after it');
    }
}

# --- the module and the command increment one counter together -------------------------
SKIP: {
    skip(command_skip('module and command on one counter'), 7) unless $cmd;
    my $c = "$dir/shared.count";
    my @kids;
    for (1 .. 3) {
        push @kids, fork_worker(sub { increment($c, wait => 30) for 1 .. 50 });
        push @kids, fork_worker(sub {
            for (1 .. 20) { my ($st, undef, $err) = capture([$cmd, 'incr', '-w', '30', $c]); die $err if $st }
        });
    }
    is(reap($_), 0, 'a worker ended well') for @kids;
    is(slurp($c), 3 * 50 + 3 * 20 . "\n", 'module and command together: exact');
}

# --- a lock lost before the commit writes nothing --------------------------------------
{
    my $d = "$dir/lost";
    mkdir $d or die;
    my $f = "$d/page";
    spit($f, "old\n");
    my ($theirs, $other);
    my $ok = eval {
        Tokenlock::Update::_native_update('write', $f, "$f.lock", sub {
            # Taken over while we compute: our lease is broken by force,
            # and another process takes the lock.
            opendir(my $dh, "$f.lock") or die;
            my ($ours) = grep { /\Alockfile\./ } readdir $dh;
            my ($broken, $err) = break_token("$f.lock", $ours);
            die "break: $err" unless $broken;
            $other = Tokenlock->acquire("$f.lock", wait => 0);
            $theirs = $other->token;
            return ("new\n");
        }, sync => 'file_and_dir');
        1;
    };
    is($ok ? 'written' : $@->code, 'lock_lost', 'a commit after a takeover: lock_lost');
    like($@->message, qr/\A\Qtokenlock: commit $f: the lock was taken over before the commit\E/, 'saying so, with the file') unless $ok;
    is(slurp($f), "old\n", 'the target is intact');
    is_deeply([entries("$f.lock")], [$theirs], 'the new holder\'s token is intact');
    is_deeply([temps($d)], [], 'no temporary file anywhere, not in the new holder\'s workspace either');
    $other->release;
}

# --- modes ------------------------------------------------------------------------------
{
    my $d = "$dir/modes";
    mkdir $d or die;
    my $old = umask 022;
    write_file("$d/new", "x");
    is(sprintf('%04o', (stat "$d/new")[2] & 07777), '0644', 'a new file: 0644 minus the umask');
    write_file("$d/exact", "x", mode => '0600');
    is(sprintf('%04o', (stat "$d/exact")[2] & 07777), '0600', 'mode is applied exactly');
    spit("$d/kept", "x");
    chmod 04640, "$d/kept";
    write_file("$d/kept", "y");
    is(sprintf('%04o', (stat "$d/kept")[2] & 07777), '0640', 'a replaced file keeps its mode, without setuid');
    write_file("$d/kept", "z", lock => "$d/kept.lock", mode => '0604');
    is(sprintf('%04o', (stat "$d/kept")[2] & 07777), '0604', 'also through the lock');
    umask $old;
}

# --- targets that are not regular files ---------------------------------------------------
{
    my $d = "$dir/odd";
    mkdir $d or die;
    spit("$d/real", "7\n");
    symlink("$d/real", "$d/link") or die;
    is(err_of(sub { increment("$d/link") }), 'system ' . POSIX::ELOOP(), 'increment through a symbolic link: ELOOP');
    like($@->message, qr/\Q$d\E\/link: it is a symbolic link/, 'naming the link');
    is(slurp("$d/real"), "7\n", 'what it points to is untouched');
    ok(-l "$d/link", 'the link stays');
    write_file("$d/link", "replaced\n");
    ok(!-l "$d/link" && slurp("$d/link") eq "replaced\n", 'write_file replaces the link itself');
    is(slurp("$d/real"), "7\n", 'and not what it pointed to');

    POSIX::mkfifo("$d/fifo", 0644) or die;
    is(err_of(sub { write_file("$d/fifo", "x") }), 'system ' . POSIX::EINVAL(), 'write_file onto a FIFO: EINVAL');
    is(err_of(sub { increment("$d/fifo", wait => 0) }), 'system ' . POSIX::EINVAL(), 'increment of a FIFO: EINVAL, without blocking');
    ok(-p "$d/fifo", 'the FIFO stays');

    open(my $fh, '>', "$d/huge") or die;
    truncate($fh, 64 * 1024 * 1024 + 1) or die;
    close $fh;
    is(err_of(sub { update_file("$d/huge", sub { 'x' }) }), 'system ' . POSIX::EFBIG(), 'a file over the read limit: EFBIG');
    is(-s "$d/huge", 64 * 1024 * 1024 + 1, 'left as it was');
    is(err_of(sub { increment("$d/huge") }), 'corrupt_data', 'a counter over 64 bytes: corrupt_data, not read');
    is(-s "$d/huge", 64 * 1024 * 1024 + 1, 'left as it was');
    spit("$d/c65", '1' x 64 . "\n");
    is(err_of(sub { increment("$d/c65") }), 'corrupt_data', 'a counter of 65 bytes: corrupt_data');
    like($@->message, qr/\Q$d\E\/c65: the file holds 65 bytes, more than the 64/, 'naming the path and the limit') if ref $@;
    is(slurp("$d/c65"), '1' x 64 . "\n", 'left as it was');
    ok(Tokenlock->try_acquire("$d/c65.lock"), 'and its lock was released');
    is_deeply([temps($d)], [], 'no temporary file anywhere');
    is(err_of(sub { increment("$d/x.count", by => '18446744073709551616') }), 'bad_argument', 'by past 2**64-1: bad_argument');
    ok(!-e "$d/x.count", 'nothing written');
}

# --- an untrusted workspace -----------------------------------------------------------------
{
    my $d = "$dir/trust";
    mkdir $d or die;
    my $c = "$d/c.count";
    is(increment($c), 1, 'a counter');
    chmod 0777, "$c.lock/lockfile/w";
    is(err_of(sub { increment($c) }), 'untrusted', 'a workspace every user may write: untrusted');
    like($@->message, qr/\Q$c.lock\E\/lockfile\.[^\/]+\/w/, 'naming it');
    is(slurp($c), "1\n", 'the counter is intact');
    is_deeply([temps($d)], [], 'no temporary file');
    is_deeply([entries("$c.lock")], ['lockfile'], 'the lock was released');
    chmod 0755, "$c.lock/lockfile/w";
    rmdir "$c.lock/lockfile/w";
    symlink($d, "$c.lock/lockfile/w") or die;
    is(err_of(sub { increment($c) }), 'untrusted', 'a workspace that is a symbolic link: untrusted');
    is(slurp($c), "1\n", 'the counter is intact');
    is_deeply([temps($d)], [], 'no temporary file');
}

# --- where the token cannot fence the commit ---------------------------------------------------
{
    my $d = "$dir/legacy";
    mkdir $d or die;
    my $c = "$d/c.count";
    # As a legacy setup leaves it: lockfile is a plain file.
    mkdir "$c.lock" or die;
    spit("$c.lock/lockfile", '');
    is(increment($c), 1, 'a file token: committed beside the target, unfenced');
    is(increment($c), 2, 'again');
    ok(-f "$c.lock/lockfile", 'the file token is back');
    is_deeply([temps($d)], [], 'no temporary file');
}
SKIP: {
    my $shm = '/dev/shm';
    my $dev_shm = (stat $shm)[0];
    skip 'no /dev/shm on another filesystem than the scratch directory', 3
      unless -d $shm && -w _ && defined $dev_shm && $dev_shm != (stat $dir)[0];
    my $lockdir = File::Temp::tempdir('tokenlock-perl-shm-XXXXXX', DIR => $shm, CLEANUP => 1);
    chmod 0755, $lockdir;
    my $c = "$dir/cross.count";
    is(increment($c, lock => "$lockdir/c.lock"), 1, 'lock and target on different filesystems: counted, unfenced');
    is(increment($c, lock => "$lockdir/c.lock"), 2, 'again');
    is_deeply([temps($dir), temps($lockdir)], [], 'no temporary file');
}

# --- version marks, played on a local disk as on a network filesystem --------------------------
{
    my $d = "$dir/net";
    mkdir $d or die;
    my $c = "$d/c.count";
    local $Tokenlock::Update::LOCAL_FOR{"$c.lock"} = 0;
    local $Tokenlock::Update::STALE_READ_BUDGET_US = 50_000;
    is(increment($c), 1, 'a counter on a "network" filesystem');
    my @marks = grep { /\Av\./ } entries("$c.lock/lockfile/w");
    is(scalar @marks, 1, 'the commit left one version mark');
    my ($hash) = $marks[0] =~ /\Av\.([0-9a-f]{16})\./;
    is($hash, Tokenlock::Update::_fnv_hex("1\n"), 'naming the FNV-1a hash of what it wrote');
    is(join(' ', map { Tokenlock::Update::_fnv_hex($_) } '', 'a', 'foobar'), 'cbf29ce484222325 af63dc4c8601ec8c 85944171f73967e8',
        'FNV-1a, 64 bits, as its published test vectors give it');
    is(increment($c), 2, 'the next update reads what the mark says');
    @marks = grep { /\Av\./ } entries("$c.lock/lockfile/w");
    is(scalar @marks, 1, 'the mark was renamed, not added to');
    # A read of an older version than the mark: the file is set back, with
    # its old modification time, as a client's cache would serve it.
    my $mtime = (stat $c)[9];
    spit($c, "1\n");
    utime($mtime - 100, $mtime - 100, $c);
    is(err_of(sub { increment($c) }), 'stale_data', 'a version older than the mark: stale_data');
    like($@->message, qr/\Q$c\E: this client keeps reading a version older/, 'saying so');
    is(slurp($c), "1\n", 'nothing was written');
    is_deeply([temps($d)], [], 'no temporary file');
    # Newer than the mark by more than the skew allowance: written outside
    # the lock, and taken as it is.
    utime($mtime + 100, $mtime + 100, $c);
    is(increment($c), 2, 'a version newer than the mark is taken as written outside the lock');
    # Newer than the mark by less than the skew allowance, as a legacy
    # script writes it just after a commit: the same version through the
    # whole wait, then taken as written outside the lock.
    require Time::HiRes;
    my ($mark) = grep { /\Av\./ } entries("$c.lock/lockfile/w");
    my ($mark_us) = $mark =~ /\.(-?[0-9]+)\z/;
    spit($c, "10\n");
    Time::HiRes::utime(($mark_us + 500_000) / 1e6, ($mark_us + 500_000) / 1e6, $c);
    is(increment($c), 11, 'a version written just after the last commit is taken after the wait');
    is_deeply([temps($d)], [], 'no temporary file');
}

# --- following symbolic links ------------------------------------------------------------------
{
    my $d = "$dir/follow";
    mkdir $d or die;
    mkdir "$d/sub" or die;
    spit("$d/sub/real", "old\n");
    chmod 0640, "$d/sub/real";
    symlink('sub/real', "$d/rel") or die;
    symlink("$d/rel", "$d/chain") or die;
    write_file("$d/chain", "new\n", follow_symlinks => 1);
    is(slurp("$d/sub/real"), "new\n", 'a chain of links, relative and absolute, is followed to the file');
    ok(-l "$d/chain" && -l "$d/rel", 'the links stay');
    is(sprintf('%04o', (stat "$d/sub/real")[2] & 07777), '0640', 'the file keeps its mode');
    spit("$d/sub/n.count", "5\n");
    symlink('sub/n.count', "$d/n.count") or die;
    write_file("$d/n.count", "6\n", follow_symlinks => 1, lock => "$d/n.lock");
    is(slurp("$d/sub/n.count"), "6\n", 'also through the lock');
    symlink('loop2', "$d/loop1") or die;
    symlink('loop1', "$d/loop2") or die;
    is(err_of(sub { write_file("$d/loop1", "x", follow_symlinks => 1) }), 'system ' . POSIX::ELOOP(), 'a loop of links: ELOOP');
    ok(-l "$d/loop1" && -l "$d/loop2", 'nothing replaced');
    is_deeply([temps($d)], [], 'no temporary file');
}
SKIP: {
    skip 'planting another user\'s link needs root', 5 unless $> == 0;
    my $d = "$dir/sticky";
    mkdir $d or die;
    chmod 01777, $d;
    chmod 0755, $dir;    # searchable by that user
    spit("$dir/victim", "mine\n");
    my $kid = fork_worker(sub {
        POSIX::setgid(65534) or die "setgid: $!";
        POSIX::setuid(65534) or die "setuid: $!";
        symlink("$dir/victim", "$d/planted") or die "symlink: $!";
    });
    is(reap($kid), 0, 'another user plants a link in a sticky directory writable by all');
    ok(-l "$d/planted", 'the link is there');
    is(err_of(sub { write_file("$d/planted", "root's\n", follow_symlinks => 1) }), 'untrusted', 'following it: untrusted');
    like($@->message, qr/refusing to follow the symbolic link \Q$d\E\/planted: it is owned by uid 65534/, 'naming the link and its owner');
    is(slurp("$dir/victim"), "mine\n", 'what it points to is untouched');
}

# --- crashed writers' temporary files; owners kept by root ----------------------------------------
{
    my $d = "$dir/sweep";
    mkdir $d or die;
    my $old = time - 7200;
    for my $n ('.c.count.tmp.0123456789abcdef', '.c.count.tmp.fedcba9876543210', '.c.count.tmp.short', '.other.tmp.0123456789abcdef') {
        spit("$d/$n", 'x');
        utime($old, $old, "$d/$n");
    }
    spit("$d/.c.count.tmp.00000000000000aa", 'young');
    symlink("$d/target-of-link", "$d/.c.count.tmp.00000000000000bb") or die;
    spit("$d/target-of-link", 'keep');
    is(Tokenlock::Files::_sweep_temps({ dir => $d, name => 'c.count' }, 3600 * 1_000_000), 2,
        'the sweep removes this target\'s temporary files older than the lease');
    is_deeply([entries($d)], [sort '.c.count.tmp.00000000000000aa', '.c.count.tmp.00000000000000bb', '.c.count.tmp.short',
        '.other.tmp.0123456789abcdef', 'target-of-link'], 'and nothing else: young ones, odd names, links, other targets');
}
SKIP: {
    skip 'keeping another user\'s ownership is done as root', 2 unless $> == 0;
    my $f = "$dir/owned";
    spit($f, "theirs\n");
    chown 65534, 65534, $f or die;
    write_file($f, "root's\n");
    is(join(':', (stat $f)[4, 5]), '65534:65534', 'root replacing a file keeps its owner and group');
    increment("$dir/owned.count");
    chown 65534, 65534, "$dir/owned.count" or die;
    increment("$dir/owned.count");
    is(join(':', (stat "$dir/owned.count")[4, 5]), '65534:65534', 'also through the lock');
}

done_testing();
