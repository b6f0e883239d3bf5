package Tokenlock::Directory;

# The lock directory: its path, a look at what it holds, its creation, and
# the cleaning of what others left behind (creation leftovers, the
# contents of a token taken over).

use strict;
use warnings;

use Fcntl ();
use Tokenlock::Error qw(_lock_error _system_error _usage);
use Tokenlock::System qw(_fsync_dir _identity _names _nonce _now_us _sleep_us);
use Tokenlock::Token qw(_classify _judge _make_token _token_of_mark);
use Tokenlock::Args qw(_dir_mode);
use Tokenlock::Trust qw(_distrust _group_shown _shared_mode);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_clear_token _create_dir _lock_paths _observe _sweep_leftovers);

# The protocol's constants, copied from Tokenlock::Token: never changed.
my ($FREE, $MAX_LEASE_US, $SKEW_US) =
  ($Tokenlock::Token::FREE, $Tokenlock::Token::MAX_LEASE_US, $Tokenlock::Token::SKEW_US);

# The lock directory's path split as lock_directory.cpp splits it.
# Parsed once per path: a long-running process locks the same few.
my %PATHS;

sub _lock_paths {
    my ($step, $lockdir) = @_;
    my $p = $PATHS{$lockdir};
    return $p if $p;
    (my $d = $lockdir) =~ s{(?<=.)/+\z}{};
    _usage("$step $lockdir",
        "\"$d\" cannot be a lock directory: the lock directory is created and replaced by rename; "
          . 'name a directory of its own, such as data.lock')
      if $d eq '/' || $d eq '.' || $d eq '..';
    my ($parent, $name) = $d =~ m{\A(.*)/([^/]*)\z}s ? ($1, $2) : ('.', $d);
    $parent = '/' if $parent eq '';
    %PATHS = () if keys %PATHS >= 1000;
    return $PATHS{$lockdir} = { dir => $d, parent => $parent, name => $name };
}

# Lists the lock directory and classifies it (lock_directory.cpp,
# observe). A listing is not a snapshot: an anomaly is concluded only when
# a second listing a moment later agrees.
sub _observe {
    my ($step, $p) = @_;
    my ($names, $tokens, $malformed);
    for my $round (0, 1) {
        my $dh;
        if (!opendir($dh, $p->{dir})) {
            return { kind => 'missing' } if $!{ENOENT};
            die _system_error($step, $p->{dir}, 'cannot list the lock directory', $! + 0);
        }
        my @all = grep { $_ ne '.' && $_ ne '..' } _names($dh);
        closedir $dh;
        my (%tok, @bad);
        my %info;
        for my $n (@all) {
            my ($kind, $t) = _classify($n);
            if ($kind eq 'free' || $kind eq 'held' || $kind eq 'legacy') { $tok{$n} = 1; $info{$n} = $t }
            elsif ($kind eq 'malformed') { push @bad, $n }
        }
        ($names, $tokens, $malformed) = (\@all, [sort keys %tok], \@bad);
        if (!@bad && @$tokens == 1) {
            my $n = $tokens->[0];
            return { kind => 'free' } if $n eq $FREE;
            return { kind => 'held', token => $info{$n} };
        }
        return { kind => 'empty' } unless @all;
        _sleep_us(2000) if $round == 0;
    }
    my $shown = sub { join ', ', map { (my $s = $_) =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge; $s } @_ };
    die _lock_error('lock_corrupt', $step, $p->{dir},
        'entry that is not a valid token: ' . $shown->(@$malformed)
          . '; tokenlock never repairs a lock by itself: if no process uses this lock, remove the directory '
          . 'and it is recreated on next use')
      if @$malformed;
    die _lock_error('token_missing', $step, $p->{dir},
        'the lock directory holds no token (it holds: ' . $shown->(@$names)
          . '); someone removed the token outside the protocol, so a holder may still be inside its critical '
          . 'section: once no process uses this lock, remove the directory and it is recreated on next use')
      unless @$tokens;
    die _lock_error('lock_corrupt', $step, $p->{dir},
        'the lock directory holds ' . scalar(@$tokens) . ' tokens: ' . $shown->(@$tokens)
          . '; a lock has exactly one token unless files were copied or created outside the protocol: '
          . 'once no process uses this lock, remove the directory and it is recreated on next use');
}

# Creates the lock directory (docs/protocol.md, Creating the lock
# directory): a populated temporary directory beside it, renamed onto its
# name, which succeeds only while that name is missing or an empty
# directory, so that concurrent creators cannot make two tokens.
sub _create_dir {
    my ($step, $p, $lease_us, $group) = @_;
    # A named group: the directory gets it, and group write.
    my $mode = _dir_mode($step) | (defined $group ? 0070 : 0);
    my $id = _identity();
    my $owned = _make_token(_now_us() + $lease_us, $id);
    my $name = "$p->{name}.init." . substr($owned, 9);
    $name = "$p->{name}.init." . _nonce() if length $name > 255;
    my $init = "$p->{parent}/$name";
    if (!mkdir($init, 0700)) {
        my $errno = $! + 0;
        die _system_error($step, $p->{dir}, "cannot create the temporary directory $init", $errno,
            $!{ENOENT} ? 'the parent directory of the lock directory must exist' : undef);
    }
    # The umask must not narrow the mode: applied exactly.
    my $fail;
    if (defined $group && !chown(-1, $group, $init)) { $fail = [$! + 0, "cannot give $init the group " . _group_shown($group)] }
    elsif (!chmod($mode, $init)) { $fail = [$! + 0, "cannot set the mode of $init"] }
    elsif (!mkdir("$init/$FREE", 0700) || !chmod(_shared_mode($mode, $init, "$init/$FREE"), "$init/$FREE")) {
        $fail = [$! + 0, "cannot create the token $init/$FREE"];
    }
    elsif (!_fsync_dir($init)) { $fail = [$! + 0, "cannot sync $init"] }
    if ($fail) {
        rmdir "$init/$FREE";
        rmdir $init;
        die _system_error($step, $p->{dir}, $fail->[1], $fail->[0]);
    }
    if (rename($init, $p->{dir})) {
        # Not an error of the lock if this fails: the directory works, and a
        # crash that undoes it is repaired by the next acquisition.
        _fsync_dir($p->{parent});
        _sweep_leftovers($p);
        return;
    }
    my $errno = $! + 0;
    my $lost = $!{ENOTEMPTY} || $!{EEXIST} || $!{ENOENT}
      # sshfs answers EPERM where a local filesystem says ENOTEMPTY.
      || (($!{EPERM} || $!{EACCES}) && -d $p->{dir});
    rmdir "$init/$FREE";
    rmdir $init;
    die _system_error($step, $p->{dir}, "cannot rename $init to the lock directory", $errno) unless $lost;
    _sweep_leftovers($p);
}

# Removes creation directories whose creator is gone or past its lease:
# only our own, only directories, never through a symbolic link.
sub _sweep_leftovers {
    my ($p) = @_;
    my $prefix = "$p->{name}.init.";
    opendir(my $dh, $p->{parent}) or return;
    my @names = grep { length $_ > length $prefix && substr($_, 0, length $prefix) eq $prefix } _names($dh);
    closedir $dh;
    for my $n (@names) {
        my $path = "$p->{parent}/$n";
        my @st = lstat $path or next;
        next if !Fcntl::S_ISDIR($st[2]) || $st[4] != $>;
        my $rest = substr($n, length $prefix);
        my ($kind, $t) = _classify("lockfile.$rest");
        my $stale;
        if ($kind eq 'held') { ($stale) = _judge($t, 0) }
        elsif ($rest =~ /\A[0-9a-f]{16}\z/) { $stale = $st[9] * 1_000_000 <= _now_us() - $MAX_LEASE_US - $SKEW_US }
        next unless $stale;
        rmdir "$path/$FREE";
        rmdir $path;
    }
}

# Empties a token taken over from a previous owner: its workspace and
# leftovers. Core Perl has no openat or unlinkat, and a path walked twice
# can name another place the second time: a member of the chosen group may
# write the lock directory and rename our token away with a link to a
# victim's directory in its place; a token left writable by others lets
# them do that to its subdirectories. Moving the token aside first would
# not help, since the lock directory is no more private than the token.
# So the walk pins each directory it clears as the working directory and
# checks lstat('.') against the identity judged before entering: from then
# on every entry is named by one component relative to it, and no rename or
# link anywhere on the path can lead the walk elsewhere. The token is
# judged first (not touched at all if untrusted), only directories of this
# user are entered, and a link is removed, never followed. The working
# directory is restored through a handle (fchdir); when none can be had,
# nothing is cleared: leftovers cost room, never safety.
sub _clear_token {
    my ($p, $token, $keep_marks, $chosen) = @_;
    my $path = "$p->{dir}/$token";
    my @st = lstat $path or return;
    return if !Fcntl::S_ISDIR($st[2]) || defined _distrust($path, @st[2, 4, 5], $chosen, 0, 0);
    my $back = _cwd_handle() or return;
    _clear_here(\@st, 0, $keep_marks) if chdir $path;
    chdir $back
      or die _system_error('take over', $p->{dir}, 'cannot return to the working directory after clearing the token '
          . "$token", $! + 0, 'the working directory was removed or made unsearchable meanwhile');
}

# A handle on the working directory that chdir can return to: read
# permission is needed for opendir; O_PATH (Linux) does without.
sub _cwd_handle {
    my $dh;
    return $dh if opendir($dh, '.');
    my $o_path = $^O eq 'linux' ? 010000000 : 0;
    return undef unless $o_path;
    sysopen(my $fh, '.', $o_path | (eval { Fcntl::O_DIRECTORY() } || 0)) or return undef;
    return $fh;
}

# Clears the working directory if it is the directory $want (an lstat)
# names; the walk of _clear_token. Returns 0 when it could not return to
# the directory it came from.
sub _clear_here {
    my ($want, $depth, $keep_marks) = @_;
    my @here = lstat '.';
    return 1 unless @here && $here[0] == $want->[0] && $here[1] == $want->[1];
    opendir(my $dh, '.') or return 1;
    my @names = _names($dh);
    for my $n (@names) {
        # Owner marks were judged one by one; ours stays.
        next if $keep_marks && $depth == 0 && _token_of_mark($n);
        my @st = lstat $n or next;
        if (!Fcntl::S_ISDIR($st[2])) {
            unlink $n;
            next;
        }
        if ($depth < 8 && $st[4] == $> && chdir $n) {
            my $ok = _clear_here(\@st, $depth + 1, 0);
            return 0 unless $ok && chdir $dh;
        }
        rmdir $n;
    }
    return 1;
}

1;
