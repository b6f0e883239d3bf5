package Tokenlock::Trust;

# The trust rules of docs/security.md (Who is trusted): whether a lock
# directory, a token or a workspace could be changed by another user, the
# group chosen for sharing, and the verdicts this process already reached.

use strict;
use warnings;

use Fcntl ();
use Tokenlock::Error qw(_lock_error _system_error);
use Tokenlock::Args qw(_dir_mode);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_check_dir _chosen_group _distrust _group_shown _shared_mode);

# The group chosen for sharing in a lock directory of lstat $st: the named
# one, else, when the directory mode has group write, the group of a lock
# directory this user owns; undef when none is chosen.
sub _chosen_group {
    my ($step, $named, $st) = @_;
    return $named if defined $named;
    return undef unless $st && $st->[4] == $> && (_dir_mode($step) & 020);
    return $st->[5];
}

sub _group_shown {
    my ($gid) = @_;
    my $name = getgrgid($gid);
    return defined $name ? "$name (gid $gid)" : "gid $gid";
}

# The trust rules of docs/security.md (trust.cpp) for a directory's lstat:
# the reason it cannot be trusted, or undef. $chosen: the group chosen for
# sharing (undef: none); $named: chosen by name; $lockdir: the lock
# directory itself, another user's of which is trusted only under a named
# group. Being a member of a group, without choosing it, trusts nothing.
sub _distrust {
    my ($path, $mode, $uid, $gid, $chosen, $named, $lockdir) = @_;
    my $m = sprintf('%04o', $mode & 07777);
    my $share = 'share it through one group instead: mode 0775 and that group named with the group option or '
      . 'TOKENLOCK_GROUP (docs/security.md)';
    return "it is writable by every user (mode $m); run chmod o-w $path if its contents are yours, or remove it; $share"
      if $mode & 002;
    my $in_chosen = defined $chosen && $gid == $chosen;
    if (($mode & 020) && !$in_chosen) {
        my $g = _group_shown($gid);
        return "it is writable by group $g (mode $m), which is not the group chosen for sharing; run chmod g-w $path "
          . 'if the group is not meant to share it; otherwise name the group: the group option or TOKENLOCK_GROUP='
          . (getgrgid($gid) || $gid);
    }
    return "it belongs to uid $uid (mode $m), who could change it; have that user (or root) remove it and it is "
      . 'created again on next use, or, if that user shares it on purpose, name the group you both share: the group '
      . 'option or TOKENLOCK_GROUP=' . (getgrgid($gid) || $gid)
      if $uid != $> && $uid != 0 && !($in_chosen && ($named || !$lockdir));
    return undef;
}

# The verdicts this process reached, by lock directory: its lstat (device,
# inode, mode, owner, group) and what else the rules depend on, and the
# chosen group. The same directory, unchanged, is not judged again; a
# replaced or changed one is.
my %TRUSTED;

# Built only of untainted parts: under perl -T a tainted value anywhere in
# a statement taints every value that statement makes.
sub _trust_key {
    my ($st, $named) = @_;
    my $mode = $ENV{TOKENLOCK_DIR_MODE};
    my $key = join(':', @$st[0, 1, 2, 4, 5], $>, defined $named ? $named : '');
    return $key unless defined $mode;
    return $mode =~ /\A([0-7]*)\z/ ? "$key:$1" : "$key:?";
}

# Judges the lock directory before anything in it is touched: 1 when it
# is there and trusted, 0 when it is missing; dies otherwise. $o->{group}
# is the named group; $o->{chosen} is set to the group chosen in it.
sub _check_dir {
    my ($step, $p, $o) = @_;
    my @st = lstat $p->{dir};
    if (!@st) {
        return 0 if $!{ENOENT};
        die _system_error($step, $p->{dir}, 'cannot look at the lock directory', $! + 0);
    }
    my $key = _trust_key(\@st, $o->{group});
    my $known = $TRUSTED{$p->{dir}};
    if (defined $known && $known->[0] eq $key) {
        $o->{chosen} = $known->[1];
        return 1;
    }
    require Fcntl;
    if (Fcntl::S_ISLNK($st[2])) {
        die _lock_error('untrusted', $step, $p->{dir},
            "refusing a lock directory that is a symbolic link (owner uid $st[4]): tokenlock never follows one there; "
              . 'name the directory it points to, or remove the link');
    }
    if (!Fcntl::S_ISDIR($st[2])) {
        die _system_error($step, $p->{dir}, 'cannot open the lock directory', POSIX::ENOTDIR());
    }
    my $chosen = _chosen_group($step, $o->{group}, \@st);
    my $why = _distrust($p->{dir}, $st[2], $st[4], $st[5], $chosen, defined $o->{group}, 1);
    die _lock_error('untrusted', $step, $p->{dir},
        sprintf('refusing the lock directory (owner uid %d, mode %04o; this process runs as uid %d): '
              . 'another user could plant or swap entries in it, and nothing in it was touched; %s',
            $st[4], $st[2] & 07777, $>, $why))
      if defined $why;
    %TRUSTED = () if keys %TRUSTED >= 1000;
    $TRUSTED{$p->{dir}} = [$key, $chosen];
    $o->{chosen} = $chosen;
    return 1;
}

# The mode for $path, a directory this process made inside $in (or for the
# group $gid): it gets that directory's group, which is the chosen one, as
# a new directory takes this process's group instead; where it cannot, it
# is not group-writable, so that no group but the chosen one can write it.
sub _shared_mode {
    my ($mode, $in, $path, $gid) = @_;
    return $mode unless $mode & 020;
    $gid = (lstat $in)[5] if !defined $gid && defined $in;
    return $mode if defined $gid && ((lstat $path)[5] == $gid || chown(-1, $gid, $path));
    return $mode & ~020;
}

1;
