#!/usr/bin/perl
# What the per-call savings of the update must keep. The target is read
# and closed before the update's code runs, so that the commit does not
# replace a file this process still holds open (its close would free the
# old version's blocks, and NFS would keep it as a .nfs* name). The
# target's directory is looked at once per process: one removed since
# fails the next update with an error that names the path, nothing
# written, no temporary file left and the lock free.
# As root, a replaced file's owner and group are still kept, without an
# fchown where the new file has them already; and a lock and release read
# $$ (a getpid) at most three times.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use Cwd ();
use POSIX ();
use TokenlockTest;

use Tokenlock qw(update_file increment);

my $dir = scratch_dir();

# The descriptors of this process open on $path.
sub open_on {
    my ($path) = @_;
    opendir(my $dh, '/proc/self/fd') or return undef;
    my @fds = grep { my $to = readlink "/proc/self/fd/$_"; defined $to && $to eq $path } grep { /\A[0-9]+\z/ } readdir $dh;
    closedir $dh;
    return scalar @fds;
}

SKIP: {
    skip('no /proc/self/fd to look at open descriptors', 2) unless -d '/proc/self/fd';
    my $f = "$dir/held.txt";
    TokenlockTest::spit($f, "old\n");
    my $during;
    update_file($f, sub { $during = open_on($f); "new\n" });
    is($during, 0, 'the target is not open while the update\'s code runs, nor at the commit');
    is(TokenlockTest::slurp($f), "new\n", 'and the update is written');
}

{
    my $sub  = "$dir/sub";
    my $lock = "$dir/sub.lock";
    mkdir $sub or die "mkdir $sub: $!";
    is(increment("$sub/c.count", lock => $lock), '1', 'a counter in a directory of its own');
    # The counter's directory goes away; its lock is elsewhere.
    unlink "$sub/c.count" or die $!;
    rmdir $sub or die "rmdir $sub: $!";
    my $ok = eval { increment("$sub/c.count", lock => $lock); 1 };
    my $err = $@;
    ok(!$ok, 'an increment in a directory removed since fails');
    is(ref $err && $err->code, 'system', 'with code system') or diag($err);
    is(ref $err && $err->errno, POSIX::ENOENT(), 'and errno ENOENT');
    like("$err", qr{\Q$sub/c.count\E}, 'naming the path');
    ok(!-e $sub, 'nothing is created in its place');
    is_deeply([temps($dir)], [], 'no temporary file is left');
    ok(free_now($lock), 'the lock is free');

    mkdir $sub or die "mkdir $sub: $!";
    is(increment("$sub/c.count", lock => $lock), '1', 'the directory made again: counted again');
}

SKIP: {
    skip('keeping the owner of a replaced file is for root', 3) unless $> == 0;
    my $f = "$dir/owned.count";
    TokenlockTest::spit($f, "5\n");
    my ($uid, $gid) = (12345, 23456);
    chown($uid, $gid, $f) or die "chown $f: $!";
    is(increment($f), '6', 'root increments a counter another user owns');
    my @st = stat $f;
    is("$st[4] $st[5]", "$uid $gid", 'which keeps its owner and group');
    is(increment($f), '7', 'and again');
}

# The system calls themselves, counted with strace: $$ read once per
# acquisition (a getpid(2) each time, seven per lock and release before),
# and no fchown of a new counter file that is root's already.
SKIP: {
    my ($strace) = grep { -x $_ } map { "$_/strace" } split /:/, $ENV{PATH} || '';
    skip('strace is not installed (scripts/install-deps installs it)', 3) unless $strace;
    my $lib = Cwd::abs_path("$FindBin::Bin/../lib");
    my $script = 'my ($l, $c) = @ARGV; Tokenlock::with_lock($l, sub { }) for 1 .. 3; Tokenlock::increment($c) for 1 .. 3; '
      . 'stat "/MARK-locks"; Tokenlock::with_lock($l, sub { }) for 1 .. 10; stat "/MARK-increments"; '
      . 'Tokenlock::increment($c) for 1 .. 10; stat "/MARK-end"';
    my ($st, $out, $err) = capture([$strace, '-f', '-o', "$dir/strace.out", $^X, "-I$lib", '-MTokenlock', '-e', $script,
        "$dir/s.lock", "$dir/s.count"]);
    is($st, 0, 'the script runs under strace') or diag($err);
    my ($part, %n) = ('');
    for my $line (split /\n/, TokenlockTest::slurp("$dir/strace.out") // '') {
        if ($line =~ m{"/MARK-(\w+)"}) { $part = $1; next }
        $n{$part}{$1}++ if $line =~ /^(?:\d+\s+)?(\w+)\(/;
    }
    cmp_ok($n{locks}{getpid} || 0, '<=', 30, 'at most three getpid per lock and release');
    if ($> == 0) { is($n{increments}{fchown} || 0, 0, 'no fchown of a counter that is root\'s already') }
    else { pass('no fchown at all when not root') }
}

done_testing();
