package Tokenlock::Turnstile;

# The turnstile of docs/waiting-turnstile.md: the file D/turnstile, whose
# flock waiters take turns at without blocking, and whose size is the
# hungry mark. It is a hint: it decides only when a waiter looks at the
# lock, so whatever is wrong with it costs latency, never the lock.

use strict;
use warnings;

use Fcntl ();
use Tokenlock::System qw(_fs_type);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_line_hungry _open_turnstile _set_mark _turnstile_usable);

my $NAME = 'turnstile';

# Local filesystems, where a flock is the kernel's and costs no round trip
# (the wait board's allowlist, lib/src/posix/posix_os.cpp). Elsewhere, or
# where the type cannot be told, waiters poll.
my %LOCAL = map { $_ => 1 } qw(ext2 ext3 ext4 xfs btrfs tmpfs ramfs f2fs overlay zfs reiserfs jfs bcachefs nilfs2);

# Per lock directory: the filesystem type the decision is made on. Read
# from the mount table once; tests set it to play another filesystem.
our %FS_TYPE;

# Per lock directory: [handle, pid] of the turnstile this process keeps
# open, so that a process that waits again pays no open. A child does not
# use its parent's: the open file description carries the flock.
my %KEPT;

sub _turnstile_usable {
    my ($p) = @_;
    $FS_TYPE{ $p->{dir} } = _fs_type($p->{dir}) unless exists $FS_TYPE{ $p->{dir} };
    my $type = $FS_TYPE{ $p->{dir} };
    return defined $type && $LOCAL{$type} ? 1 : 0;
}

# Whether a head has marked the line hungry: one lstat, the only call the
# turnstile adds to the fast path. Only a regular file's size counts, so
# that an entry of another kind never holds newcomers back.
sub _line_hungry {
    my ($p) = @_;
    my @st = lstat "$p->{dir}/$NAME";
    return @st && $st[7] > 0 && ($st[2] & 0170000) == 0100000;
}

# Why the handle's fstat makes it no turnstile, or undef. $gid: the group
# the lock is shared with (undef: none).
sub _misjudged {
    my ($fh, $p, $gid) = @_;
    my @st = stat $fh or return "cannot fstat: $!";
    return 'not a regular file' unless Fcntl::S_ISREG($st[2]);
    return "$st[3] links" unless $st[3] == 1;
    my $dir_owner = (lstat $p->{dir})[4];
    return "owned by uid $st[4]" unless $st[4] == $> || (defined $dir_owner && $st[4] == $dir_owner);
    return 'writable by others' if $st[2] & 0002;
    return 'group-writable for a group the lock is not shared with'
      if ($st[2] & 0020) && !(defined $gid && $st[5] == $gid);
    return undef;
}

# Creates the turnstile (only a waiter that saw the lock held may) with
# its mode exactly: 0600, or 0660 and the group when the lock is shared.
# O_EXCL never follows a link. Returns (handle, made) or ().
sub _create {
    my ($path, $gid) = @_;
    my $fh;
    my $flags = Fcntl::O_RDWR() | Fcntl::O_CREAT() | Fcntl::O_EXCL() | Fcntl::O_NOFOLLOW() | Fcntl::O_NOCTTY();
    return () unless sysopen($fh, $path, $flags, 0600);
    # Where the group cannot be given, the file stays 0600.
    my $mode = defined $gid && ((stat $fh)[5] == $gid || chown(-1, $gid, $fh)) ? 0660 : 0600;
    chmod $mode, $fh;
    return ($fh, 1);
}

# The turnstile's handle, opened (or created when $may_create) without
# following a link or blocking on a FIFO and judged by fstat; undef when
# there is none to use (a planted entry, an unwritable directory): the
# caller then polls, for this wait. $gid as in _misjudged.
sub _open_turnstile {
    my ($p, $gid, $may_create) = @_;
    my $kept = $KEPT{ $p->{dir} };
    if ($kept && $kept->[1] == $$) {
        my @st = stat $kept->[0];
        return $kept->[0] if @st && $st[3] > 0 && !defined _misjudged($kept->[0], $p, $gid);
        # Removed (no link left), or changed: the name is opened again.
    }
    delete $KEPT{ $p->{dir} };
    my $path = "$p->{dir}/$NAME";
    my ($fh) = $may_create ? _create($path, $gid) : ();
    if (!$fh) {
        my $flags = Fcntl::O_RDWR() | Fcntl::O_NOFOLLOW() | Fcntl::O_NONBLOCK() | Fcntl::O_NOCTTY();
        return undef unless sysopen($fh, $path, $flags);
    }
    if (defined _misjudged($fh, $p, $gid)) {
        close $fh;
        return undef;
    }
    %KEPT = () if keys %KEPT >= 100;
    $KEPT{ $p->{dir} } = [$fh, $$];
    return $fh;
}

# Sets (1) or clears (0) the hungry mark; true when it is set afterwards.
sub _set_mark {
    my ($fh, $on) = @_;
    truncate($fh, $on ? 1 : 0);
    return $on;
}

1;
