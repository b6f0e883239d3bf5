package Tokenlock::Files;

# Files, natively: the atomic write of docs/atomic-writes.md. The target
# resolved and checked, a temporary file written and flushed, renamed over
# the target, the directory flushed; reading a target under the lock.

use strict;
use warnings;

use Fcntl ();
use Tokenlock::Error qw(_error _system_error);
use Tokenlock::System qw(_fsync_dir _names _nonce _now_us);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_counter_too_large _file_error _mode_of _native_write _read_target _resolve_target _sweep_temps _sync_target_dir _write_temp);

# The largest file an update reads (default_read_limit), and the largest
# counter file (counter_max_bytes).
my $READ_LIMIT = 64 * 1024 * 1024;
our $COUNTER_LIMIT = 64;

sub _file_advice {
    my ($errno, $dir) = @_;
    local $! = $errno;
    return "check the permissions of $dir: this process (uid $>) must be able to write and search it"
      if $!{EACCES} || $!{EPERM};
    return 'the directory of the file must exist' if $!{ENOENT};
    return "the filesystem of $dir is full or over quota: free space" if $!{ENOSPC} || $!{EDQUOT};
    return "the filesystem of $dir is mounted read-only" if $!{EROFS};
    return '';
}

sub _file_error {
    my ($step, $t, $what, $errno) = @_;
    return _system_error($step, $t->{path}, $what, $errno, _file_advice($errno, $t->{dir}));
}

# The devices of the targets' directories this process found, by path:
# looked at once, since each update would otherwise stat the same one. A
# directory removed or replaced since is found by the commit's rename
# (ENOENT, ENOTDIR; EXDEV for another filesystem, which commits beside the
# target instead).
my %DIR_DEV;

# The target of a write: its path, directory and name, and what a
# replacement keeps (the mode of a regular file it replaces). A directory
# or a special file is refused. A symbolic link is replaced, as if the
# name were free, unless $follow: then the chain of links is resolved (at
# most 40 hops), each link checked as the kernel's protected_symlinks
# checks it, and the file it ends at is the target.
sub _resolve_target {
    my ($step, $path, $follow) = @_;
    my $bad = sub { die _error(code => 'bad_argument', status => 64, message => "tokenlock: $step \"$path\": $_[0]") };
    $bad->("the target path ends in '/': name a file") if $path =~ m{/\z};
    my $t;
    for (my $hops = 0;; $hops++) {
        my ($dir, $name) = $path =~ m{\A(.*)/([^/]*)\z}s ? ($1, $2) : ('.', $path);
        $dir = '/' if $dir eq '';
        $bad->('the target must name a file') if $name eq '.' || $name eq '..';
        $t = { path => $path, dir => $dir, name => $name, exists => 0 };
        my @st = lstat $path;
        if (!@st) {
            die _file_error($step, $t, 'cannot look at the target', $! + 0) unless $!{ENOENT};
            last;
        }
        if (Fcntl::S_ISLNK($st[2])) {
            last unless $follow;
            die _file_error($step, $t, 'too many levels of symbolic links', POSIX::ELOOP()) if $hops >= 40;
            _check_link($step, $t, \@st);
            my $to = readlink $path;
            die _file_error($step, $t, 'cannot read the symbolic link', $! + 0) unless defined $to;
            $path = $to =~ m{\A/} ? $to : "$dir/$to";
            next;
        }
        die _file_error($step, $t, 'the target is a directory', POSIX::EISDIR()) if Fcntl::S_ISDIR($st[2]);
        die _system_error($step, $t->{path},
            'the target is not a regular file (a device, FIFO or socket cannot be replaced atomically)', POSIX::EINVAL(), '')
          unless Fcntl::S_ISREG($st[2]);
        $t->{exists} = 1;
        # Its setuid, setgid and sticky bits belonged to its contents.
        $t->{keep_mode} = $st[2] & 0777;
        $t->{keep_owner} = [$st[4], $st[5]];
        last;
    }
    my $dev = $DIR_DEV{ $t->{dir} };
    if (defined $dev) {
        $t->{dir_dev} = $dev;
        return $t;
    }
    my @dst = stat $t->{dir};
    if (!@dst) {
        my $errno = $! + 0;
        die _system_error($step, $t->{path}, "its directory $t->{dir} does not exist", $errno, 'create the directory first')
          if $!{ENOENT};
        die _file_error($step, $t, "cannot look at the directory $t->{dir}", $errno);
    }
    die _file_error($step, $t, "$t->{dir} is not a directory", POSIX::ENOTDIR()) unless Fcntl::S_ISDIR($dst[2]);
    # Its filesystem: a fenced commit needs the lock's token on the same one.
    $t->{dir_dev} = $dst[0];
    %DIR_DEV = () if keys %DIR_DEV >= 1000;
    $DIR_DEV{ $t->{dir} } = $dst[0];
    return $t;
}

# In a directory that is sticky and writable by all, anyone may plant a
# link: one is followed only when it is ours or the directory owner's.
sub _check_link {
    my ($step, $t, $link_st) = @_;
    my @d = stat $t->{dir};
    die _file_error($step, $t, "cannot look at the directory $t->{dir} of the symbolic link", $! + 0) unless @d;
    return unless ($d[2] & 01000) && ($d[2] & 0002);
    return if $link_st->[4] == $> || $link_st->[4] == $d[4];
    die _error(code => 'untrusted', status => 77,
        message => "tokenlock: $step $t->{path}: refusing to follow the symbolic link $t->{path}: it is owned by uid "
          . "$link_st->[4], neither this user (uid $>) nor the owner of $t->{dir} (uid $d[4]), a directory that is sticky "
          . sprintf('and writable by all (mode %04o), where anyone may plant a link; nothing was written or read: ', $d[2] & 07777)
          . "name the file it points to directly, or have that link removed and made by uid $>"
          . ($> == $d[4] ? '' : " or $d[4]"));
}

sub _umask_mode { my $u = umask; return 0644 & ~(defined $u ? $u : 022) }

# Writes $data to a new temporary file .NAME.tmp.<16 hex> in $in_dir,
# flushed as $sync asks; returns its path. On failure nothing is left.
sub _write_temp {
    my ($t, $in_dir, $data, $sync, $mode) = @_;
    my $tmp = "$in_dir/.$t->{name}.tmp." . _nonce();
    my $fh;
    # O_EXCL and O_NOFOLLOW: a link planted under that name cannot
    # redirect the write.
    if (!sysopen($fh, $tmp, Fcntl::O_WRONLY() | Fcntl::O_CREAT() | Fcntl::O_EXCL() | (eval { Fcntl::O_NOFOLLOW() } || 0), 0600)) {
        die _file_error('create', $t, "cannot create the temporary file $tmp", $! + 0);
    }
    binmode $fh;
    my $fail;
    # As root, the replaced file's owner and group are kept (best effort),
    # so that the program owning the data can still write it. A new file
    # that has them already (root's own data) is left alone: an fstat reads
    # what an fchown would write to the inode and its journal.
    if ($t->{keep_owner} && $> == 0) {
        my ($uid, $gid) = @{ $t->{keep_owner} };
        my @now = stat $fh;
        chown($uid, $gid, $fh) unless @now && $now[4] == $uid && $now[5] == $gid;
    }
    if (!chmod($mode, $fh)) { $fail = ['create', "cannot set the mode of the temporary file $tmp", $! + 0] }
    else {
        my $off = 0;
        while ($off < length $data) {
            my $w = syswrite($fh, $data, length($data) - $off, $off);
            if (!defined $w) {
                next if $!{EINTR};
                $fail = ['write', "cannot write the temporary file $tmp", $! + 0];
                last;
            }
            $off += $w;
        }
    }
    if (!$fail && $sync ne 'none' && !$fh->sync) { $fail = ['sync', "cannot flush the temporary file $tmp", $! + 0] }
    # A failure here counts: NFS reports write errors at close.
    if (!close($fh) && !$fail) { $fail = ['close', "closing the temporary file $tmp failed", $! + 0] }
    if ($fail) {
        unlink $tmp;
        die _file_error($fail->[0], $t, $fail->[1], $fail->[2]);
    }
    return $tmp;
}

sub _sync_target_dir {
    my ($t, $sync, $done, $advice, $value) = @_;
    return if $sync ne 'file_and_dir';
    return if _fsync_dir($t->{dir});
    my $cause = "$!";
    my $what = "$done, but flushing the directory $t->{dir} failed ($cause): a crash may undo it$advice";
    $what .= "; give this user read permission on $t->{dir} (chmod u+r, or g+r for a shared group), or write with sync file"
      if $!{EACCES} || $!{EPERM};
    die _error(code => 'dir_sync_failed', status => 74, value => $value, message => "tokenlock: sync $t->{path}: $what");
}

sub _mode_of {
    my ($t, $mode) = @_;
    # Checked by write_file: untainted here, since chmod refuses a tainted mode.
    return oct(($mode =~ /\A(0[0-7]{1,4})\z/)[0]) if defined $mode;
    return defined $t->{keep_mode} ? $t->{keep_mode} : _umask_mode();
}

# write_file without a lock: temp beside the target, renamed over it.
sub _native_write {
    my ($path, $data, $sync, $mode, $follow) = @_;
    my $t = _resolve_target('write', $path, $follow);
    my $tmp = _write_temp($t, $t->{dir}, $data, $sync, _mode_of($t, $mode));
    if (!rename($tmp, $t->{path})) {
        my $errno = $! + 0;
        unlink $tmp;
        die _file_error('rename', $t, "cannot rename $tmp over the target", $errno);
    }
    _sync_target_dir($t, $sync, 'the new contents are in place', '');
    return 1;
}

# Reads the target under the lock: regular files only, at most the read
# limit, never through a symbolic link (the commit replaces a link, so
# what it points to is not the target's contents). Returns (contents or
# undef when missing, its mtime in microseconds). The handle is closed
# before the commit replaces the file: closed after, it would be the last
# reference to the replaced version, and its close would free that
# version's blocks (8 ms on ext4 under load), and NFS would have to keep
# the file as a .nfs* name meanwhile.
sub _read_target {
    my ($t, $counter) = @_;
    # A counter holds at most 64 bytes (docs/security.md): more is not read.
    my $limit = $counter ? $COUNTER_LIMIT : $READ_LIMIT;
    my $fh;
    if (!sysopen($fh, $t->{path}, Fcntl::O_RDONLY() | Fcntl::O_NONBLOCK() | (eval { Fcntl::O_NOFOLLOW() } || 0))) {
        return (undef) if $!{ENOENT};
        die _system_error('read', $t->{path},
            'it is a symbolic link, and links are not followed here (the write replaces the link), so what it '
              . 'points to, maybe another user\'s file, was not read; nothing was written: name the file it points to, '
              . 'ask to follow links, or remove the link', POSIX::ELOOP(), '')
          if $!{ELOOP};
        die _file_error('read', $t, 'cannot open the target', $! + 0);
    }
    # Reading does not change the modification time, which the version
    # mark compares: one stat serves both.
    require Time::HiRes;
    my @st = Time::HiRes::stat($fh);
    die _system_error('read', $t->{path}, 'it is a directory; nothing was written', POSIX::EISDIR(), '')
      if Fcntl::S_ISDIR($st[2]);
    die _system_error('read', $t->{path},
        'it is not a regular file (a FIFO, device or socket), and was not read; nothing was written: put a regular file there',
        POSIX::EINVAL(), '')
      unless Fcntl::S_ISREG($st[2]);
    die _counter_too_large($t->{path}, $st[7]) if $counter && $st[7] > $limit;
    die _system_error('read', $t->{path}, "it is too large ($st[7] bytes, the limit is $READ_LIMIT); nothing was written",
        POSIX::EFBIG(), '')
      if $st[7] > $limit;
    binmode $fh;
    my $text = '';
    while (1) {
        my $r = sysread($fh, $text, $counter ? $limit + 1 - length $text : 65536, length $text);
        if (!defined $r) {
            next if $!{EINTR};
            die _file_error('read', $t, 'cannot read the target', $! + 0);
        }
        last if $r == 0;
        die _counter_too_large($t->{path}, length $text) if $counter && length $text > $limit;
        die _system_error('read', $t->{path}, "it grew past the limit of $READ_LIMIT bytes; nothing was written",
            POSIX::EFBIG(), '')
          if length $text > $limit;
    }
    close $fh;
    return ($text, int(($st[9] || 0) * 1_000_000));
}

sub _counter_too_large {
    my ($path, $size) = @_;
    return _error(
        code    => 'corrupt_data',
        status  => 65,
        message => "tokenlock: read counter $path: the file holds $size bytes, more than the $COUNTER_LIMIT a counter "
          . 'holds; it was not read, nothing was written and it was left as it is: repair or remove it by hand',
    );
}

# Removes this target's temporary files older than a lease, which no live
# writer holding the lock can own: those of crashed writes beside it.
# Only regular files named exactly .NAME.tmp.<16 hex>.
sub _sweep_temps {
    my ($t, $lease_us) = @_;
    opendir(my $dh, $t->{dir}) or return 0;
    my $prefix = ".$t->{name}.tmp.";
    my @names = grep { substr($_, 0, length $prefix) eq $prefix && substr($_, length $prefix) =~ /\A[0-9a-f]{16}\z/ } _names($dh);
    closedir $dh;
    my $removed = 0;
    for my $n (@names) {
        my @st = lstat "$t->{dir}/$n" or next;
        next unless Fcntl::S_ISREG($st[2]) && $st[9] * 1_000_000 < _now_us() - $lease_us;
        $removed += unlink "$t->{dir}/$n";
    }
    return $removed;
}

1;
