#!/usr/bin/perl
# Owner marks, as made on filesystems where a rename can move a name that
# is gone (GlusterFS). They are forced here on a local disk, where the
# module would not make them, and the double rename is played by planting
# the mark another holder would have made. Also holder().
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

use Tokenlock;

my $cmd = tokenlock_command();
my $dir = scratch_dir();
my $n   = 0;
sub fresh { my $L = "$dir/l" . ++$n . '.lock'; $Tokenlock::Marks::OWNER_MARKS{$L} = 1; return $L }

sub now_us { require Time::HiRes; my ($s, $us) = Time::HiRes::gettimeofday(); return $s * 1_000_000 + $us }
sub mark_of { 'h.' . substr($_[0], 9) }

is(Tokenlock::Marks::_needs_marks({ dir => "$dir/local.lock", parent => $dir }), 0,
    'a lock on this local filesystem gets no marks by itself');

# The filesystem type by device number, else by the longest mount point
# that holds the real path (a btrfs subvolume's device is in no mount).
{
    mkdir "$dir/mnt" or die;
    mkdir "$dir/mnt/in dir" or die;
    TokenlockTest::spit("$dir/mountinfo",
        "1 0 999:1 / / rw - ext4 /dev/x rw\n"
          . "2 1 999:2 / $dir/mnt rw shared:1 - fuse.glusterfs srv:/vol rw\n"
          . "3 1 999:3 / $dir/mn rw - nfs4 srv:/x rw\n");
    is(Tokenlock::System::_fs_type("$dir/mnt/in dir", "$dir/mountinfo"), 'fuse.glusterfs', 'the longest mount point holding the path');
    is(Tokenlock::System::_fs_type($dir, "$dir/mountinfo"), 'ext4', 'a path under no other mount point: the root\'s');
    is(Tokenlock::System::_fs_type("$dir/nothing-here", "$dir/mountinfo"), undef, 'a missing path: unknown');
    my @st = stat $dir;
    my ($maj, $min) = ((($st[0] >> 8) & 0xfff) | (($st[0] >> 32) & ~0xfff), ($st[0] & 0xff) | (($st[0] >> 12) & ~0xff));
    TokenlockTest::spit("$dir/mountinfo2", "1 0 999:1 / / rw - ext4 /dev/x rw\n2 1 $maj:$min / /elsewhere rw - xfs /dev/y rw\n");
    is(Tokenlock::System::_fs_type("$dir/mnt", "$dir/mountinfo2"), 'xfs', 'the device number first');
}

my $host_tag;
{
    my $L = "$dir/probe.lock";
    my $lock = Tokenlock->acquire($L);
    ($host_tag) = $lock->token =~ /\Alockfile\.\d+\.([^.]+)\./;
    $lock->release;
}
my $my_start = do { my $s = slurp("/proc/$$/stat"); (split ' ', substr($s, rindex($s, ')') + 1))[19] };

# --- a holder marks its token, renames the mark on refresh, removes it on release
{
    my $L = fresh();
    my $lock = Tokenlock->acquire($L, wait => 0);
    my $t = $lock->token;
    is_deeply([entries("$L/$t")], [mark_of($t)], 'the holder\'s mark is in its token');
    my $t2 = $lock->refresh(lease => 100);
    is_deeply([entries("$L/$t2")], [mark_of($t2)], 'a refresh renames it to the new lease');
    ok(!free_now($L), 'another process (the command if there is one) is excluded as before');
    $lock->release;
    is_deeply([entries($L)], ['lockfile'], 'released');
    is_deeply([entries("$L/lockfile")], [], 'without its mark');
}

# --- another live holder's mark in the token: step back ---------------------------
{
    my $L = fresh();
    Tokenlock->acquire($L, wait => 0)->release;
    # As if another client renamed the same directory first and marked it:
    # its owner is this process (alive), its lease runs.
    my $theirs = 'lockfile.' . (now_us() + 600_000_000) . ".$host_tag.$$.$my_start.0123456789abcdef";
    mkdir "$L/lockfile/" . mark_of($theirs) or die;
    my $ok = eval { Tokenlock->acquire($L, wait => 0); 1 };
    is($ok ? 'acquired' : $@->code, 'busy', 'a live mark of another holder: busy');
    like($@->message, qr/held by pid $$ on this host/, 'naming that holder') unless $ok;
    is_deeply([entries($L)], [$theirs], 'the token went back to the name its holder knows');
    is_deeply([entries("$L/$theirs")], [mark_of($theirs)], 'with only that holder\'s mark in it');
}

# --- a dead holder's mark is removed ------------------------------------------------
{
    my $L = fresh();
    Tokenlock->acquire($L, wait => 0)->release;
    my $dead = 'lockfile.' . (now_us() - 10_000_000) . '.elsewhere-0badc0de.7.0.0123456789abcdef';
    mkdir "$L/lockfile/" . mark_of($dead) or die;
    mkdir "$L/lockfile/not-a-mark" or die;
    my $lock = Tokenlock->acquire($L, wait => 0);
    ok($lock, 'an expired mark does not hold the lock');
    is_deeply([entries("$L/" . $lock->token)], [sort(mark_of($lock->token), 'not-a-mark')],
        'it was removed; an entry that is no mark stays');
    $lock->release;
}

# --- a takeover keeps only live marks ---------------------------------------------------
{
    my $L = fresh();
    mkdir $L or die;
    my $stale = 'lockfile.' . (now_us() - 10_000_000) . '.elsewhere-0badc0de.7.0.0123456789abcdef';
    mkdir "$L/$stale" or die;
    mkdir "$L/$stale/" . mark_of($stale) or die;
    mkdir "$L/$stale/w" or die;
    spit("$L/$stale/w/.f.tmp.1", 'x');
    my $lock = Tokenlock->acquire($L, wait => 0);
    ok($lock, 'the stale token is taken over');
    is_deeply([entries("$L/" . $lock->token)], [mark_of($lock->token)], 'its owner\'s mark and workspace went, ours is there');
    $lock->release;
}

# --- holder() ---------------------------------------------------------------------------
{
    my $L = "$dir/h.lock";
    is(Tokenlock::holder($L), undef, 'a missing lock has no holder');
    my $lock = Tokenlock->acquire($L);
    my $h = Tokenlock::holder($L);
    is($h->{token}, $lock->token, 'holder: the token');
    is($h->{pid}, $$, 'the pid');
    is($h->{owner}, 'alive', 'a live owner');
    is($h->{same_host}, 1, 'on this host');
    is($h->{stale}, 0, 'not stale');
    my $st = lock_status($L);
    is($h->{expires_us}, $st->{expires_us}, 'the expiry the command (or the token\'s name) tells');
    SKIP: {
        skip(command_skip('comparing the reason with the command\'s'), 1) unless $cmd;
        is($h->{reason}, $st->{reason}, 'and the same reason, word for word');
    }
    $lock->release;
    is(Tokenlock::holder($L), undef, 'free: no holder');
    my $legacy = 'lockfile' . (int(now_us() / 1e6) - 1000);
    rename("$L/lockfile", "$L/$legacy") or die;
    $h = Tokenlock::holder($L);
    is($h->{legacy}, 1, 'a legacy token is described');
    is($h->{stale}, 1, 'stale after the legacy timeout');
    is($h->{owner}, 'unknown', 'naming no owner');
    is_deeply([entries($L)], [$legacy], 'holder() changes nothing');
}

done_testing();
