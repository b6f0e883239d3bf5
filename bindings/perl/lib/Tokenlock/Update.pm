package Tokenlock::Update;

# The fenced update of docs/atomic-writes.md: under the lock, the target
# read (and checked against the version mark on a network filesystem),
# the new contents computed, and committed by a rename through the lock's
# token, so that a holder that lost the lock writes nothing. Also
# write_file and update_file.

use strict;
use warnings;

use Fcntl ();
use Tokenlock::Error qw(_error _lock_error _usage);
use Tokenlock::System qw(_fnv1a _fs_type _load_part _names _native_setup _sleep_us _steady_us);
use Tokenlock::Token ();
use Tokenlock::Args qw(_arg_path _check_opts _dir_mode _group_args _legacy_timeout _path_arg _seconds _sync);
use Tokenlock::Trust qw(_distrust _shared_mode);
use Tokenlock::Lock qw(_acquire _refresh);
use Tokenlock::Files qw(_file_error _mode_of _native_write _read_target _resolve_target _sweep_temps _sync_target_dir _write_temp);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_native_update);

# The protocol's constants, copied from Tokenlock::Token: never changed.
my $SKEW_US = $Tokenlock::Token::SKEW_US;

# How long a stale read on a network filesystem is read again. Tests
# shorten it.
our $STALE_READ_BUDGET_US = 3_000_000;

my %LOCAL_FS = map { $_ => 1 } qw(ext2 ext3 ext4 xfs btrfs tmpfs ramfs f2fs overlay zfs reiserfs jfs bcachefs nilfs2);

# Whether $path is on a local filesystem; unknown counts as local, as the
# library's updater counts it. Tests set %LOCAL_FOR to play a network
# filesystem on a local disk.
our %LOCAL_FOR;

# Asked once per lock directory and process: a mount table can be long.
my %LOCAL_SEEN;

sub _on_local_fs {
    my ($path) = @_;
    return $LOCAL_FOR{$path} if defined $LOCAL_FOR{$path};
    return $LOCAL_SEEN{$path} if defined $LOCAL_SEEN{$path};
    my $type = _fs_type($path);
    return $LOCAL_SEEN{$path} = !defined $type || $LOCAL_FS{$type} ? 1 : 0;
}

# ---- version marks, on network filesystems ---------------------------------
# `D/<token>/w/v.<FNV-1a hash of the contents>.<mtime of the new file, µs>`:
# what the last commit wrote, so that the next holder can tell a stale read
# from its client's cache (docs/atomic-writes.md, The version mark).

sub _fnv_hex { my ($hi, $lo) = _fnv1a($_[0]); return (sprintf('%08x%08x', $hi, $lo) =~ /\A([0-9a-f]{16})\z/)[0] }

sub _read_version_mark {
    my ($workspace) = @_;
    opendir(my $dh, $workspace) or return undef;
    my $best;
    for my $n (_names($dh)) {
        next unless $n =~ /\Av\.([0-9a-f]{16})\.(-?[0-9]+)\z/;
        $best = { name => $n, hash => $1, mtime_us => $2 } if !$best || $2 > $best->{mtime_us};
    }
    closedir $dh;
    return $best;
}

sub _write_version_mark {
    my ($workspace, $old, $hash, $mtime_us) = @_;
    my $name = "v.$hash.$mtime_us";
    return if $old && $old->{name} eq $name;
    return if $old && rename("$workspace/$old->{name}", "$workspace/$name");
    if (sysopen(my $fh, "$workspace/$name", Fcntl::O_WRONLY() | Fcntl::O_CREAT() | Fcntl::O_EXCL(), 0644)) { close $fh }
}

# ---- the fenced update ------------------------------------------------------

sub _lost_before_commit {
    my ($t, $token) = @_;
    return _error(code => 'lock_lost', status => 3,
        message => "tokenlock: commit $t->{path}: the lock was taken over before the commit (our token $token is "
          . 'gone: our lease ended or we were judged dead); nothing was written and the new owner\'s data is intact');
}

# Whether our token is gone: a lookup's ENOENT is confirmed by a listing,
# since a network client may answer a lookup from a stale cache.
# ESTALE counts as ENOENT here: a GlusterFS client that still has a token
# cached that a takeover moved answers with it.
sub _missing { return $!{ENOENT} || $!{ESTALE} }

# A lookup that finds the token is checked against a listing too: an sshfs
# client keeps a renamed name in its entry cache. Only failed steps ask.
sub _token_gone {
    my ($lock) = @_;
    my $found = lstat("$lock->{lockdir}/$lock->{token}") ? 1 : 0;
    return 0 if !$found && !_missing();
    opendir(my $dh, $lock->{lockdir}) or return !$found;
    my $there = grep { $_ eq $lock->{token} } _names($dh);
    closedir $dh;
    return !$there;
}

# The token's workspace `w`, made by the first update, judged by the trust
# rules: another user who could write it could swap the temporary file.
# Returns (path, made).
sub _workspace {
    my ($lock, $t, $tok) = @_;
    my $token_path = "$lock->{lockdir}/$lock->{token}";
    my $w = "$token_path/w";
    my $made = 0;
    my @st = lstat $w;
    if (!@st && $!{ENOENT}) {
        if (mkdir($w, 0700)) {
            $made = 1;
            chmod(_shared_mode(_dir_mode('commit') | (defined $lock->{group} ? 0070 : 0), undef, $w, $lock->{chosen}), $w);
        }
        elsif (!$!{EEXIST}) {
            die _lost_before_commit($t, $lock->{token}) if _missing() && _token_gone($lock);
            die _file_error('create', $t, "cannot create the workspace $w", $! + 0);
        }
        @st = lstat $w;
    }
    die _file_error('commit', $t, "cannot look at the workspace $w", $! + 0) unless @st;
    for my $d ([$token_path, "lock's token", $tok], [$w, "lock's workspace", \@st]) {
        my ($path, $what, $s) = @$d;
        next unless @$s;
        my $why = !Fcntl::S_ISDIR($s->[2]) || Fcntl::S_ISLNK($s->[2]) ? 'it is not a directory; remove it'
          : _distrust($path, $s->[2], $s->[4], $s->[5], $lock->{chosen}, defined $lock->{group}, 0);
        if (defined $why) {
            rmdir $w if $made;
            die _lock_error('untrusted', 'commit', $path,
                sprintf('refusing the %s (owner uid %d, mode %04o; this process runs as uid %d): another user could '
                      . 'plant or swap entries in it, and nothing in it was touched; %s', $what, $s->[4], $s->[2] & 07777, $>, $why));
        }
    }
    return ($w, $made);
}

# Commits $data over the target through the token: the temporary file in
# D/<token>/w, renamed over the target by a path that runs through the
# token's name, so that it fails once the lock was taken over. Returns 1,
# or 0 (nothing written) when the token cannot fence it: a file token, or
# the target on another filesystem.
sub _fenced_commit {
    my ($lock, $t, $data, $sync, $mode, $mark) = @_;
    my $token_path = "$lock->{lockdir}/$lock->{token}";
    my @tok = lstat $token_path;
    if (!@tok) {
        die _lost_before_commit($t, $lock->{token}) if _missing() && _token_gone($lock);
        die _file_error('commit', $t, "cannot look at the lock's token $token_path", $! + 0);
    }
    # A token that is a file, as a legacy script's setup may have made it,
    # has no room for the temporary file.
    # A link there is refused by the workspace's checks.
    return 0 if (!Fcntl::S_ISDIR($tok[2]) && !Fcntl::S_ISLNK($tok[2])) || $tok[0] != $t->{dir_dev};
    my ($w, $made) = _workspace($lock, $t, \@tok);
    my $tmp = eval { _write_temp($t, $w, $data, $sync, $mode) };
    if (!defined $tmp) {
        my $err = $@;
        rmdir $w if $made;
        die _lost_before_commit($t, $lock->{token}) if ref $err && ($err->errno == POSIX::ENOENT() || $err->errno == POSIX::ESTALE()) && _token_gone($lock);
        die $err;
    }
    require Time::HiRes;
    my @written = $mark ? Time::HiRes::lstat($tmp) : ();
    if (!rename($tmp, $t->{path})) {
        my $errno = $! + 0;
        my $exdev = $!{EXDEV};
        unlink $tmp;
        rmdir $w if $made;
        return 0 if $exdev;
        local $! = $errno;
        # Made through the token's name a moment ago: a rename that no
        # longer finds it, into a directory that is there, lost the token
        # (an sshfs client may still find the old name in its caches).
        die _lost_before_commit($t, $lock->{token}) if _missing() && (_token_gone($lock) || -d $t->{dir});
        die _file_error('rename', $t, "cannot rename $tmp over the target", $errno);
    }
    _write_version_mark($w, $mark->{old}, _fnv_hex($data), int($written[9] * 1_000_000)) if $mark && @written;
    return 1;
}

# The update flow of update_file: lock, read, compute, commit through the
# token, release, flush the directory. $compute gets the current contents
# (undef: missing) and returns the new ones, or dies. Returns what
# $compute returned as its second value.
sub _native_update {
    my ($step, $path, $lockdir, $compute, %o) = @_;
    my $t;
    my $wait = defined $o{wait} ? $o{wait} : 10;
    my $lock = _acquire('Tokenlock', 'acquire', $lockdir, wait => $wait,
        (defined $o{legacy_timeout} ? (legacy_timeout => $o{legacy_timeout}) : ()),
        (defined $o{lease} ? (lease => $o{lease}) : ()), (defined $o{group} ? (group => $o{group}) : ()));
    my $value;
    my $ok = eval {
        $t = _resolve_target('write', $path, $o{follow_symlinks});
        _sweep_temps($t, $lock->{lease_us}) if int(rand(32)) == 0;
        my $network = !_on_local_fs($lock->{lockdir});
        my $mark = $network ? { old => _read_version_mark("$lock->{lockdir}/$lock->{token}/w") } : undef;
        my ($current, $mtime);
        ($current, $mtime) = _read_target($t, $o{counter});
        $current = _read_past_mark($lock, $t, $mark->{old}, $o{counter}, $current, $mtime) if $mark && $mark->{old};
        my $next;
        ($next, $value) = $compute->($current);
        _commit($lock, $t, $next, $o{sync}, _mode_of($t, $o{mode}), $mark);
        1;
    };
    my $err = $@;
    # Released whatever happened; after a commit a failure to release is
    # not reported, which would invite a retry that counts twice.
    eval { $lock->release if $lock->held; 1 };
    die $err unless $ok;
    _sync_target_dir($t, $o{sync}, 'the update is committed', '; do not repeat the update', $value);
    return $value;
}

# A read older than what the last commit wrote (the version mark $old) is
# a stale read from the client's cache: read again, with backoff, until it
# is not, within a budget; then stale_data. Returns the contents read.
sub _read_past_mark {
    my ($lock, $t, $old, $counter, $current, $mtime) = @_;
    my $start = _steady_us();
    my $budget = $STALE_READ_BUDGET_US;
    $budget = $lock->{lease_us} / 4 if $lock->{lease_us} / 4 < $budget;
    my ($pause, $reads) = (5000, 1);
    # One version, read for the whole wait and newer than the mark
    # though within the skew: written outside the lock just after
    # the last commit (a stale cache serves an older one).
    my $first = defined $current ? _fnv_hex($current) : undef;
    my $one_version = defined $first;
    while (!(defined $current && _fnv_hex($current) eq $old->{hash})
        && !(defined $current && $mtime > $old->{mtime_us} + $SKEW_US))
    {
        my $left = $start + $budget - _steady_us();
        last if $left <= 0 && $one_version && $mtime > $old->{mtime_us};
        die _error(code => 'stale_data', status => 75,
            message => "tokenlock: read $t->{path}: this client keeps reading a version older than the one the "
              . "last update committed ($reads reads in " . int((_steady_us() - $start) / 1000)
              . ' ms); nothing was written; the filesystem (' . (_fs_type($t->{dir}) || 'a network filesystem')
              . ') serves stale cached data: turn its client caches off (tokenlock doctor DIR --peer DIR2 checks a mount)')
          if $left <= 0;
        _sleep_us($pause < $left ? $pause : $left);
        $pause = $pause * 2 > 200_000 ? 200_000 : $pause * 2;
        ($current, $mtime) = _read_target($t, $counter);
        $reads++;
        $one_version = 0 unless defined $current && defined $first && _fnv_hex($current) eq $first;
    }
    return $current;
}

# Commits $next through the token; where the token cannot fence it (a
# file token, the target on another filesystem), beside the target, with
# ownership proved by a refresh rename just before the commit. The window
# between the two remains.
sub _commit {
    my ($lock, $t, $next, $sync, $mode, $mark) = @_;
    _refuse_shared($lock);
    return if _fenced_commit($lock, $t, $next, $sync, $mode, $mark);
    my $tmp = _write_temp($t, $t->{dir}, $next, $sync, $mode);
    my $token = $lock->{token};
    if (!eval { _refresh($lock, $lock->{lease_us}); 1 }) {
        my $err = $@;
        unlink $tmp;
        die(ref $err && $err->code eq 'lock_lost' ? _lost_before_commit($t, $token) : $err);
    }
    if (!rename($tmp, $t->{path})) {
        my $errno = $! + 0;
        unlink $tmp;
        die _file_error('rename', $t, "cannot rename $tmp over the target", $errno);
    }
}

# A shared hold has no token of its own to commit through.
sub _refuse_shared {
    my ($lock) = @_;
    die _error(code => 'bad_argument', status => 64, message => "tokenlock: commit $lock->{lockdir}: "
          . 'a shared hold gives no fence; take the lock exclusively to write')
      if $lock->{shared};
}

sub write_file {
    my ($path, $data, %opts) = @_;
    my $step = 'write';
    _check_opts($step, \%opts, qw(sync lock wait legacy_timeout mode follow_symlinks group));
    _path_arg($step, 'the file', $path);
    _usage("$step $path", 'the data is undef; pass "" to write an empty file') unless defined $data;
    my $bytes = "$data";
    _usage("$step $path", 'the data holds characters above 255; encode it first (Encode::encode_utf8)')
      unless utf8::downgrade($bytes, 1);
    # The data is complete in memory, so empty data is meant: the command's
    # guard against a failed producer does not apply.
    my @args = ('write', '--allow-empty', '--sync', _sync($step, $opts{sync}));
    push @args, '--lock', _arg_path(_path_arg($step, 'lock', $opts{lock})) if defined $opts{lock};
    if (defined $opts{mode}) {
        # A number such as 0640 arrives here as 416: refused rather than
        # guessed, since its digits would also read as an octal mode.
        _usage("$step $path", "mode must be a string of octal digits such as '0640', not \"$opts{mode}\"")
          unless $opts{mode} =~ /^0[0-7]{1,4}\z/;
        push @args, '--mode', $opts{mode};
    }
    push @args, '--follow-symlinks' if $opts{follow_symlinks};
    push @args, _legacy_timeout($step, \%opts), _group_args($step, \%opts);
    if (defined $opts{wait}) {
        _usage("$step $path", 'wait applies to the lock: give lock too') unless defined $opts{lock};
        _seconds($step, 'wait', $opts{wait}, 1);
    }
    if (!defined $opts{command}) {
        _native_setup();
        my $sync = _sync($step, $opts{sync});
        return _native_write($path, $bytes, $sync, $opts{mode}, $opts{follow_symlinks}) unless defined $opts{lock};
        _native_update($step, $path, $opts{lock}, sub { ($bytes) }, %opts, sync => $sync);
        return 1;
    }
    _load_part('Command');
    Tokenlock::Command::_call_waiting({ step => $step, path => $path, opts => \%opts, stdin => $bytes, busy => 'timed_out' },
        $opts{wait}, @args, _arg_path($path));
    return 1;
}

# Read-modify-write under the lock, committed through the token: $code
# gets the current contents (undef: no file) and returns the new ones.
sub update_file {
    my ($path, $code, %opts) = @_;
    my $step = 'update';
    _check_opts($step, \%opts, qw(lock wait lease sync mode legacy_timeout follow_symlinks group));
    _path_arg($step, 'the file', $path);
    _usage("$step $path", 'the second argument must be a code reference') unless ref $code eq 'CODE';
    _usage("$step $path", "mode must be a string of octal digits such as '0640', not \"$opts{mode}\"")
      if defined $opts{mode} && $opts{mode} !~ /^0[0-7]{1,4}\z/;
    _native_setup();
    my $lockdir = defined $opts{lock} ? _path_arg($step, 'lock', $opts{lock}) : "$path.lock";
    _seconds($step, 'wait', $opts{wait}, 1) if defined $opts{wait} && $opts{wait} ne 'forever';
    return _native_update($step, $path, $lockdir, sub {
        my $next = $code->($_[0]);
        die _error(code => 'bad_argument', status => 64,
            message => "Tokenlock: $step $path: the update's code returned undef; return \"\" for an empty file; "
              . 'nothing was written')
          unless defined $next;
        my $bytes = "$next";
        die _error(code => 'bad_argument', status => 64,
            message => "Tokenlock: $step $path: the update's code returned characters above 255; encode them first "
              . '(Encode::encode_utf8); nothing was written')
          unless utf8::downgrade($bytes, 1);
        return ($bytes, $bytes);
    }, %opts, sync => _sync($step, $opts{sync}));
}

1;
