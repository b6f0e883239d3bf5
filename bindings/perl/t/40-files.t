#!/usr/bin/perl
# write_file, increment and read_counter: contents, failures, and what a
# failure leaves behind (the target as it was, no temporary file).
use strict;
use POSIX ();
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

use Tokenlock qw(write_file increment read_counter);

my $cmd = tokenlock_command();
my $dir = scratch_dir();

# Checks that a failed call left $path holding $before and no temporary
# file beside it.
sub intact {
    my ($path, $before, $name) = @_;
    my ($d, $base) = $path =~ m{\A(.*)/([^/]+)\z};
    is(slurp($path), $before, "$name: the file is unchanged");
    is(scalar(leftovers($d, $base)), 0, "$name: no temporary file is left");
}

# --- write_file -----------------------------------------------------------------
{
    my $f = "$dir/config.txt";
    ok(write_file($f, "first\n"), 'write_file returns true');
    is(slurp($f), "first\n", 'a new file has the data');
    my $ino = (stat $f)[1];
    write_file($f, "second version\n", sync => 'file');
    is(slurp($f), "second version\n", 'the contents are replaced');
    isnt((stat $f)[1], $ino, 'by a new file renamed over the old one');
    is(scalar(leftovers($dir, 'config.txt')), 0, 'no temporary file .config.txt.tmp.* is left');

    write_file($f, '');
    ok(-e $f, 'empty data: the file exists');
    is(-s $f, 0, 'and is empty');
    is(scalar(leftovers($dir, 'config.txt')), 0, 'no temporary file is left');

    my $bin = join('', map { chr } 0 .. 255) x 4096;    # 1 MiB, NULs and all
    write_file($f, $bin, sync => 'none');
    ok(slurp($f) eq $bin, 'a mebibyte of binary data arrives byte for byte');

    write_file("$dir/moded", "x", mode => '0640');
    is((stat "$dir/moded")[2] & 07777, 0640, "mode => '0640' applies to a new file");
    chmod 0600, "$dir/moded";
    write_file("$dir/moded", "y");
    is((stat "$dir/moded")[2] & 07777, 0600, 'an existing file keeps its mode');
    write_file("$dir/moded", "z", mode => '0644');
    is((stat "$dir/moded")[2] & 07777, 0644, 'an explicit mode wins over the mode of the file it replaces');

    write_file($f, "under the lock\n", lock => "$dir/config.lock");
    is(slurp($f), "under the lock\n", 'lock => LOCKDIR writes');
    ok(-d "$dir/config.lock", 'through that lock');

    symlink("$dir/real", "$dir/link") or die $!;
    write_file("$dir/real", "target\n");
    write_file("$dir/link", "through the link\n", follow_symlinks => 1);
    ok(-l "$dir/link", 'follow_symlinks keeps the link');
    is(slurp("$dir/real"), "through the link\n", 'and replaces the file it points to');

    # Refused before anything is written.
    write_file($f, "keep\n");
    for my $case (
        [undef,          {},                    qr/the data is undef/,             'undef data'],
        ["caf\x{e9}\x{263a}", {},               qr/characters above 255/,          'characters above 255'],
        ["x",            { mode => 0640 },      qr/string of octal digits/,        'a numeric mode'],
        ["x",            { sync => 'fast' },    qr/sync must be none, file or file_and_dir/, 'a bad sync level'],
        ["x",            { colour => 'red' },   qr/unknown option 'colour'/,       'an unknown option'],
      )
    {
        my ($data, $opts, $re, $name) = @$case;
        my $ok = eval { write_file($f, $data, %$opts); 1 };
        ok(!$ok && $@->code eq 'bad_argument', "$name: a usage error") or diag($@);
        like($@->message, $re, "$name: saying what is wrong");
        intact($f, "keep\n", $name);
    }

    # Refused by the command: a missing directory, a directory in the way.
    my $ok = eval { write_file("$dir/no-such-dir/f", "x"); 1 };
    ok(!$ok, 'a missing directory fails');
    is($@->code . ' ' . $@->errno, 'system ' . POSIX::ENOENT(), 'with system, ENOENT');
    like($@->message, qr/\Q$dir\E\/no-such-dir\/f/, 'naming the file');
    ok(!-e "$dir/no-such-dir", 'nothing was created');

    mkdir "$dir/adir" or die $!;
    $ok = eval { write_file("$dir/adir", "x"); 1 };
    ok(!$ok, 'a directory as the target fails');
    is($@->code . ' ' . $@->errno, 'system ' . POSIX::EISDIR(), 'with system, EISDIR') or diag($@);
    ok(-d "$dir/adir", 'the directory is still there');
    is(scalar(leftovers($dir, 'adir')), 0, 'no temporary file is left');
}

# --- increment ------------------------------------------------------------------
{
    my $c = "$dir/c.count";
    is(increment($c), 1, 'a missing counter counts from 0');
    is(slurp($c), "1\n", 'the file holds the value and a newline');
    is(increment($c, by => 41), 42, 'by => 41');
    is(increment($c, by => 0), 42, 'by => 0 reads');
    is(increment($c, sync => 'none', wait => 1), 43, 'with sync and wait');
    is(increment("$dir/c2.count", lock => "$dir/other.lock"), 1, 'lock => LOCKDIR');
    ok(-d "$dir/other.lock" && !-e "$dir/c2.count.lock", 'that lock, not the default one');

    TokenlockTest::spit($c, "18446744073709551614\n");
    is(increment($c), '18446744073709551615', 'exact up to 2**64-1');
    my $ok = eval { increment($c); 1 };
    is($ok ? 'no error' : $@->code . ' ' . $@->errno, 'system ' . POSIX::EOVERFLOW(), 'past 2**64-1: system, EOVERFLOW (status 65)');
    like($@->message, qr/overflow/, 'the message says overflow') unless $ok;
    intact($c, "18446744073709551615\n", 'overflow');

    # Corrupt counters are refused and left byte for byte.
    for my $bad ("garbage\n", "12", "012\n", "-1\n", " 5\n", "", "1\n2\n") {
        my $shown = join '', map { sprintf '\\x%02x', ord } split //, $bad;
        TokenlockTest::spit($c, $bad);
        my $ok = eval { increment($c); 1 };
        my $err = $@;
        ok(!$ok, "counter \"$shown\": increment fails");
        is($err->code,   'corrupt_data', "counter \"$shown\": corrupt_data");
        is($err->status, 65,             "counter \"$shown\": exit status 65");
        like($err->message, qr/\Q$c\E/, "counter \"$shown\": the message names the file");
        intact($c, $bad, "counter \"$shown\"");
        my $rc = eval { read_counter($c); 1 };
        is($rc ? 'read' : $@->code, 'corrupt_data', "counter \"$shown\": read_counter agrees");
    }
    my $held = Tokenlock->try_acquire("$c.lock");
    ok($held, 'the failures left the counter\'s lock free');
    $held->release if $held;

    $ok = eval { increment("$dir/nodir/x.count"); 1 };
    is($ok ? 'no error' : $@->code . ' ' . $@->errno, 'system ' . POSIX::ENOENT(), 'a counter in a missing directory: system, ENOENT');
    ok(!-e "$dir/nodir", 'nothing was created');

    for my $by ('-1', '1.5', 'x') {
        ok(!eval { increment("$dir/u.count", by => $by); 1 } && $@->code eq 'bad_argument', "by => '$by' is a usage error");
    }
    ok(!-e "$dir/u.count", 'none of them created the counter');
}

# --- increment waits for a held lock ----------------------------------------------
{
    my $c = "$dir/w.count";
    TokenlockTest::spit($c, "5\n");
    my $lock = Tokenlock->acquire("$c.lock");
    pipe(my $r, my $w) or die $!;
    my $child = fork_worker(sub {
        close $r;
        syswrite $w, "waiting\n";
        syswrite $w, increment($c) . "\n";
    });
    close $w;
    is(read_line($r), 'waiting', 'an incrementer starts while the lock is held');
    # The holder changes the counter under the lock: the incrementer must
    # build on that, not on what it could have read earlier.
    write_file($c, "100\n");
    $lock->release;
    is(read_line($r), 101, 'it waited for the lock and built on the holder\'s update');
    is(reap($child), 0, 'it ended well');
}

# --- a directory that cannot be flushed ---------------------------------------------
# Write-only for its user (mode 0333, as upload drop directories are), so
# fsync(2) cannot even open it: each commit is made, then its flush fails.
# The count is made, so the error carries its value. Root opens any
# directory: the calls then run in a child that is nobody.
{
    my $drop = "$dir/drop";
    mkdir $drop or die "mkdir $drop: $!";
    chmod 0755, $dir;
    chmod 0333, $drop;
    pipe(my $r, my $w) or die $!;
    my $child = fork_worker(sub {
        close $r;
        if ($> == 0) {
            require POSIX;
            POSIX::setgid(65534) or die "setgid: $!";
            POSIX::setuid(65534) or die "setuid: $!";
        }
        for my $call (sub { increment("$drop/c.count") }, sub { increment("$drop/c.count") },
            sub { write_file("$drop/page", "new\n") })
        {
            my $ok = eval { $call->(); 1 };
            my $e = $@;
            print $w join("\t", $ok ? ('none', '', '') : ($e->code, defined $e->value ? $e->value : 'undef',
                $e->message)), "\n";
        }
        close $w;
    });
    close $w;
    my @got = map { [ split /\t/, read_line($r), 3 ] } 1 .. 3;
    is(reap($child), 0, 'unflushable directory: the child ended well');
    chmod 0755, $drop;
    is_deeply([ map { [ @$_[0, 1] ] } @got ], [ [ 'dir_sync_failed', 1 ], [ 'dir_sync_failed', 2 ], [ 'dir_sync_failed', 'undef' ] ],
        'unflushable directory: increment and write_file fail with dir_sync_failed, increment with the value it counted');
    like($got[0][2], qr/\Qsync $drop\/c.count: the update is committed, but flushing the directory $drop failed\E/,
        'unflushable directory: the message names the file, the step and the directory');
    like($_->[2], qr/\Qgive this user read permission on $drop\E/, 'unflushable directory: the message gives the fix')
      for @got;
    is(slurp("$drop/c.count"), "2\n", 'unflushable directory: both counts are made');
    is(slurp("$drop/page"),    "new\n", 'unflushable directory: the new contents are in place');
    is(scalar(leftovers($drop, 'page')), 0, 'unflushable directory: no temporary file is left');
}

# --- read_counter -----------------------------------------------------------------
{
    is(read_counter("$dir/none.count"), undef, 'read_counter: undef for a missing file');
    TokenlockTest::spit("$dir/r.count", "77\n");
    is(read_counter("$dir/r.count"), 77, 'read_counter: the value');
    is(read_counter("$dir/c2.count"), 1, 'read_counter agrees with increment');

    # A FIFO would block an open and a read; a device never ends: refused
    # before the first byte, within a bound (the alarm), the FIFO left.
    require POSIX;
    POSIX::mkfifo("$dir/fifo.count", 0644) or die "mkfifo: $!";
    my $code = eval {
        local $SIG{ALRM} = sub { die "blocked\n" };
        alarm 10;
        my $ok = eval { read_counter("$dir/fifo.count"); 1 };
        alarm 0;
        $ok ? 'read' : ref $@ ? $@->code : $@;
    };
    is($code, 'system', 'read_counter of a FIFO: refused without blocking');
    like($@->message, qr/\Q$dir\E\/fifo\.count: it is not a regular file/, 'naming the path and the cause') if ref $@;
    ok(-p "$dir/fifo.count", 'the FIFO stays');
    symlink('/dev/zero', "$dir/zero.count") or die;
    is((eval { read_counter("$dir/zero.count"); 1 } ? 'read' : ref $@ ? $@->code : $@), 'system',
        'read_counter of a link to /dev/zero: refused');
    TokenlockTest::spit("$dir/big.count", '1' x 64 . "\n");
    is((eval { read_counter("$dir/big.count"); 1 } ? 'read' : ref $@ ? $@->code : $@), 'corrupt_data',
        'read_counter of 65 bytes: corrupt_data (a counter holds at most 64)');
    like($@->message, qr/holds 65 bytes, more than the 64/, 'saying so') if ref $@;
    TokenlockTest::spit("$dir/max.count", '0' x 63 . "\n");
    is((eval { read_counter("$dir/max.count"); 1 } ? 'read' : ref $@ ? $@->code : $@), 'corrupt_data',
        '64 bytes are read, and judged by the counter grammar');
    like($@->message, qr/does not hold one unsigned decimal/, 'as not canonical') if ref $@;
}

done_testing();
