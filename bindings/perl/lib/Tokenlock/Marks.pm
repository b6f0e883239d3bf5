package Tokenlock::Marks;

# Owner marks (docs/protocol.md, Owner marks): where a rename can move a
# name that is gone (GlusterFS), each new holder marks the token it renamed
# and steps back when it finds another live holder's mark there.

use strict;
use warnings;

use Tokenlock::Error qw(_system_error);
use Tokenlock::System qw(_fs_type _names);
use Tokenlock::Token qw(_judge _mark_of _owner_part _token_of_mark);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_mark_and_check _needs_marks);

# The protocol's constants, copied from Tokenlock::Token: never changed.
my $FREE = $Tokenlock::Token::FREE;

# Filesystems whose renames keep the protocol's property by themselves:
# local ones (the wait board's allowlist), and network ones whose server
# renames by name.
my %NO_MARKS = map { $_ => 1 } qw(ext2 ext3 ext4 xfs btrfs tmpfs ramfs f2fs overlay zfs reiserfs jfs
  bcachefs nilfs2 fuse.sshfs fuse.mfs fuse.moosefs nfs nfs4 cifs smb3 ceph fuse.ceph fuse.ceph-fuse);

# Per lock directory: whether marks are made. Tests set this to force them.
our %OWNER_MARKS;

sub _needs_marks {
    my ($p) = @_;
    return $OWNER_MARKS{$p->{dir}} if defined $OWNER_MARKS{$p->{dir}};
    # The lock directory may not exist yet; its parent is then asked.
    my $type = _fs_type($p->{dir});
    $type = _fs_type($p->{parent}) unless defined $type;
    # A filesystem that cannot be asked gets marks, as in the library.
    return $OWNER_MARKS{$p->{dir}} = defined $type && $NO_MARKS{$type} ? 0 : 1;
}

# The live marks in a token other than ours, after removing those of the
# owner taken over from and those of dead or expired owners: the first
# live one's (token, reason), or ().
sub _judge_marks {
    my ($path, $ours, $taken_from, $o) = @_;
    opendir(my $dh, $path) or return ('gone', $!{ENOENT} || $!{ESTALE} ? undef : $! + 0);
    my @names = _names($dh);
    closedir $dh;
    my $taken_owner = defined $taken_from ? _owner_part($taken_from) : undef;
    my @live;
    for my $n (@names) {
        next if $n eq $ours;
        my $t = _token_of_mark($n) or next;
        if (defined $taken_owner && _owner_part($t->{name}) eq $taken_owner) {
            rmdir "$path/$n";
            next;
        }
        my ($stale, $reason) = _judge($t, $o->{legacy_timeout_us});
        if ($stale) {
            rmdir "$path/$n";
            next;
        }
        @live = ($t->{name}, $reason) unless @live;
    }
    return ('seen', @live);
}

# Confirms with an owner mark a token that a rename made ours: 'held',
# ('yielded', reason) after handing the token back to the live holder whose
# mark is in it, or 'abandoned' when the token is gone from under us.
sub _mark_and_check {
    my ($step, $p, $o, $token, $taken_from) = @_;
    my $path = "$p->{dir}/$token";
    my $mark = _mark_of($token);
    my $ok;
    for (1 .. 3) {
        $ok = mkdir("$path/$mark", 0700) || $!{EEXIST};
        last if $ok || !$!{ESTALE};
    }
    # Gone already: a second rename of the name we took moved our token.
    return ('abandoned') if !$ok && ($!{ENOENT} || $!{ESTALE});
    return _give_up($step, $p, $o, $token, $taken_from, 'cannot make the owner mark in', $! + 0) unless $ok;
    my ($what, @live) = _judge_marks($path, $mark, $taken_from, $o);
    if ($what eq 'gone') {
        return _give_up($step, $p, $o, $token, $taken_from, 'cannot list the owner marks in', $live[0])
          if defined $live[0];
        rmdir "$path/$mark";
        return ('abandoned');
    }
    return ('held') unless @live;
    # The mark stays inside during the rename: whoever holds the directory
    # through a stale name of its own meanwhile finds it and steps back too.
    my $back = "$p->{dir}/$live[0]";
    if (rename($path, $back)) { rmdir "$back/$mark" }
    else { rmdir "$path/$mark" }
    return ('yielded', $live[1]);
}

sub _give_up {
    my ($step, $p, $o, $token, $taken_from, $what, $errno) = @_;
    my $path = "$p->{dir}/$token";
    rmdir "$path/" . _mark_of($token);
    my ($seen, @live) = _judge_marks($path, _mark_of($token), $taken_from, $o);
    my $outcome = '; the token stays until its lease ends';
    $outcome = '; the lock was freed again' if $seen eq 'seen' && !@live && rename($path, "$p->{dir}/$FREE");
    my $err = _system_error($step, $p->{dir}, "$what $token", $errno);
    $err->{message} .= $outcome;
    die $err;
}

1;
