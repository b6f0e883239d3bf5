package Tokenlock::Shared;

# Shared holders and semaphores (docs/protocol.md, Shared locks and semaphores): the names of
# shares, the share entries inside the token, and the steps of a reader,
# of a semaphore's holder and of a writer that finds them. Core Perl has no
# openat: the token directory is judged by lstat and its entries are made
# and removed by path, D/<token>/s.<name>, one component inside a trusted
# directory (docs/protocol.md, Shared locks and semaphores: Hostile neighbours).

use strict;
use warnings;

use Fcntl ();
use Tokenlock::Error qw(_lock_error _system_error);
use Tokenlock::System qw(_identity _names _nonce _now_us _steady_us);
use Tokenlock::Token qw(_classify _judge _make_token _utc);
use Tokenlock::Trust qw(_distrust);
use Tokenlock::Directory qw(_lock_paths _observe);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_drop_mark _handed_over _holders_of _lone_name _reader_look _refresh_share _release_share
  _writer_look);

my ($FREE, $MAX_LEASE_US, $SKEW_US) =
  ($Tokenlock::Token::FREE, $Tokenlock::Token::MAX_LEASE_US, $Tokenlock::Token::SKEW_US);

# ---------------------------------------------------------------------------
# Names

# A shared name of this process: kind 0 a lone share, 1 a group cover, 2 a
# draining cover; $limit 0 for readers, N for a semaphore of N.
sub _shared_name {
    my ($expiry_us, $id, $kind, $limit, $nonce) = @_;
    $nonce = _nonce($id) unless defined $nonce;
    return "$FREE." . int($expiry_us) . ".$id->{stag}.$id->{pid}.1$kind" . sprintf('%06d', $limit)
      . "$id->{start12}.$nonce";
}

sub _lone_name { my ($expiry_us, $id, $limit) = @_; return _shared_name($expiry_us, $id, 0, $limit) }

# This process's share entry, with its own lease.
sub _my_entry { my ($expiry_us, $id) = @_; return 's.' . int($expiry_us) . ".$id->{owner}." . _nonce($id) }

# A copy of the lone share $t (parsed): the entry that holds its share once
# a converter or a marking writer has renamed it, made by that process and
# named for it alone (the last half of the nonce is the maker's), so that
# a maker whose rename fails removes its copy whatever happened meanwhile.
sub _copy_of {
    my ($t, $id) = @_;
    return "s.$t->{expiry_us}.$t->{host_tag}.$t->{pid}.$t->{start}." . substr($t->{nonce}, 0, 8)
      . substr(_nonce($id), 8);
}

# Whether the entry named $n is a copy of the lone share $t, whoever made it.
sub _is_copy_of {
    my ($n, $t) = @_;
    my $prefix = "s.$t->{expiry_us}.$t->{host_tag}.$t->{pid}.$t->{start}." . substr($t->{nonce}, 0, 8);
    return length $n == length($prefix) + 8 && substr($n, 0, length $prefix) eq $prefix
      && substr($n, -8) =~ /\A[0-9a-f]{8}\z/;
}

# The writer's token that the last one out renames a draining cover $t to.
sub _handover_of { my ($t) = @_; return "$FREE.$t->{expiry_us}.$t->{host_tag}.$t->{pid}.$t->{start}.$t->{nonce}" }

sub _is_cover { my ($t) = @_; return $t && $t->{shared} && ($t->{shared}{kind} == 1 || $t->{shared}{kind} == 2) }

# Every rename of a shared name raises its expiry by at least 1 us, so that
# no shared name is made twice: the compare-and-swap needs new names.
sub _later { my ($t, $want) = @_; return $want > $t->{expiry_us} ? $want : $t->{expiry_us} + 1 }

# The same cover with a later expiry: a draining cover keeps its writer
# and nonce; a group cover takes this process's identity and a new nonce.
sub _cover_after {
    my ($t, $id, $want) = @_;
    my $expiry = _later($t, $want);
    return _shared_name($expiry, $id, 1, $t->{shared}{limit}) if $t->{shared}{kind} == 1;
    (my $rest = $t->{name}) =~ s/\Alockfile\.[0-9]+\.//;
    return "$FREE.$expiry.$rest";
}

sub _what_holds {
    my ($t) = @_;
    my $s = $t->{shared};
    return "a writer's token $t->{name}" unless $s;
    my $mode = $s->{limit} ? "a semaphore of $s->{limit}" : 'shared holders (no limit)';
    return "$mode, a lone share $t->{name}" if $s->{kind} == 0;
    return "$mode, the group cover $t->{name}" if $s->{kind} == 1;
    return "$mode, with a writer (pid $t->{pid}) waiting for them to leave: $t->{name}" if $s->{kind} == 2;
    return "a shared name of a kind this version does not know, judged by its lease: $t->{name}";
}

# ---------------------------------------------------------------------------
# The token directory and its entries

# Judges the token directory at $name by lstat, as the workspace is judged:
# 'dir', 'gone', or ('no', why) for a link, a file, a FIFO (no entry is
# made or listed through them). Dies with untrusted.
sub _token_dir {
    my ($step, $p, $name, $o) = @_;
    my $path = "$p->{dir}/$name";
    my @st = lstat $path;
    return ('gone') if !@st && ($!{ENOENT} || $!{ESTALE});
    die _system_error($step, $p->{dir}, "cannot look at the token $name", $! + 0) unless @st;
    return ('no', 'the token is a symbolic link') if Fcntl::S_ISLNK($st[2]);
    return ('no', 'the token is not a directory (a file token admits one lone share)') unless Fcntl::S_ISDIR($st[2]);
    my $why = _distrust($path, @st[2, 4, 5], $o->{chosen}, defined $o->{group}, 0);
    die _lock_error('untrusted', $step, $p->{dir},
        "refusing the token $name: another user could plant or remove share entries in it, and nothing in it "
          . "was touched; $why")
      if defined $why;
    return ('dir');
}

# The share entries of the token at $name: live (parsed), stale and
# malformed names; undef when the name is gone (renamed meanwhile) or is
# no directory to list (judged first).
sub _list_token {
    my ($step, $p, $name, $o) = @_;
    return undef unless (_token_dir($step, $p, $name, $o))[0] eq 'dir';
    my $dh;
    if (!opendir($dh, "$p->{dir}/$name")) {
        return undef if $!{ENOENT} || $!{ENOTDIR} || $!{ESTALE};
        die _system_error($step, $p->{dir}, "cannot list the token $name", $! + 0);
    }
    my %l = (live => [], stale => [], malformed => []);
    my %counted;
    for my $n (_names($dh)) {
        next unless substr($n, 0, 2) eq 's.';
        my ($kind, $t) = _classify('lockfile.' . substr($n, 2), 1);
        if ($kind ne 'held') { push @{ $l{malformed} }, $n; next }
        $t->{entry} = $n;
        my ($stale, $reason, $owner) = _judge($t, 0);
        @$t{qw(stale reason owner)} = ($stale ? 1 : 0, $reason, $owner);
        # The copies of one lone share (the same but for the last half of
        # the nonce, their makers' own) are one holder.
        next if !$stale && $counted{ substr($n, 0, -8) }++;
        push @{ $l{ $stale ? 'stale' : 'live' } }, $t;
    }
    closedir $dh;
    return \%l;
}

sub _corrupt_entries {
    my ($step, $p, $name, $list) = @_;
    die _lock_error('lock_corrupt', $step, $p->{dir},
        "the token $name holds share entries that are not valid: "
          . join(', ', map { (my $s = $_) =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge; $s } @{ $list->{malformed} })
          . '; they may be shares, so nothing was taken and nothing removed: once no process uses this lock, '
          . 'remove the directory and it is recreated on next use');
}

# Removes entries by their exact names in the token now named $name: a
# directory with rmdir, anything else (a link, a FIFO, a file) with
# unlink, never followed or opened. A non-empty directory is lock_corrupt.
sub _remove_entries {
    my ($step, $p, $name, @entries) = @_;
    for my $e (@entries) {
        my $path = "$p->{dir}/$name/$e";
        my @st = lstat $path or next;
        next if Fcntl::S_ISDIR($st[2]) ? rmdir $path : unlink $path;
        next if $!{ENOENT};
        die _lock_error('lock_corrupt', $step, $p->{dir},
            "the stale share entry $e in the token $name is a directory with something in it; nothing was "
              . 'removed: look at it, and remove it by hand once no process uses this lock')
          if $!{ENOTEMPTY} || $!{EEXIST};
        die _system_error($step, $p->{dir}, "cannot remove the stale share entry $e from the token $name", $! + 0);
    }
}

# Removes entries this process made in a token whose name may have
# changed since. A removal that finds no entry proves nothing: the token
# may have been renamed in between, and `lockfile` comes back under the
# same name. The token directory is one object whatever its name, so its
# listing, through the name it has when opened, says whether an entry is
# still in it; one still there is removed again by the name of the moment.
sub _undo_entries {
    my ($step, $p, $o, $mine) = @_;
    my %left = map { $_ => 1 } @$mine;
    for (1 .. 100) {
        return unless %left;
        my $obs = _observe($step, $p);
        return unless $obs->{kind} eq 'held' || $obs->{kind} eq 'free';
        my $name = $obs->{kind} eq 'free' ? $FREE : $obs->{token}{name};
        my ($d) = _token_dir($step, $p, $name, $o);
        next if $d eq 'gone';
        return if $d ne 'dir';
        for my $e (keys %left) {
            # Something that cannot be removed (a plant with something in
            # it) is left as it is.
            delete $left{$e} if rmdir("$p->{dir}/$name/$e") || !($!{ENOENT} || $!{ENOTDIR} || $!{ESTALE});
        }
        return unless %left;
        my $dh;
        opendir($dh, "$p->{dir}/$name") or next;
        my %there = map { $_ => 1 } _names($dh);
        closedir $dh;
        delete @left{ grep { !$there{$_} } keys %left };
    }
}

# Removes entries this process made that are no share, then takes the last
# one out's steps: a leaver may have seen them as live (a copy names the
# lone holder, alive, with its lease) and left the cover to us.
sub _take_back {
    my ($step, $p, $o, $mine) = @_;
    _undo_entries($step, $p, $o, $mine);
    _after_leave($step, $p, $o, 0);
}

# ---------------------------------------------------------------------------
# A reader or a semaphore's holder

# One look of a shared acquisition at the token $seen: ('acquired', name,
# expiry, 0, entry), ('again') or ('busy', reason). $o: limit, lease_us.
sub _reader_look {
    my ($step, $p, $o, $seen, $take) = @_;
    my $s = $seen->{shared};
    if (!$s || $s->{kind} == 0 || $s->{kind} > 2) {
        my ($stale, $reason) = _judge($seen, $o->{legacy_timeout_us});
        return $take->($seen, $reason) if $stale;
        return ('busy', $reason) if !$s || $s->{kind} > 2;
    }
    if ($s->{limit} != $o->{limit}) {
        # Another mode's cover with nobody left in it is nobody's.
        if ($s->{kind} == 1 && (_token_dir($step, $p, $seen->{name}, $o))[0] eq 'dir') {
            my $list = _list_token($step, $p, $seen->{name}, $o) or return ('again');
            return $take->($seen, 'a cover with no live share in it') unless @{ $list->{live} } || @{ $list->{malformed} };
        }
        my $want = $o->{limit} ? "a semaphore of $o->{limit}" : 'a shared hold (no limit)';
        return ('busy', "held by " . _what_holds($seen) . "; this process asks for $want, and waits until they are gone");
    }
    return ('busy', 'held by ' . _what_holds($seen) . ', all it admits') if $s->{kind} == 0 && $s->{limit} == 1;
    return _convert($step, $p, $o, $seen) if $s->{kind} == 0;
    return _join($step, $p, $o, $seen) if $s->{kind} == 1;
    # A draining cover: no reader joins it. Its writer provably dead on
    # this host, or its lease ended (never earlier than a member's: it holds
    # nobody's share), it is unmarked, and freed with no live entry in it.
    return ('busy', 'held by ' . _what_holds($seen)) unless _mark_is_over($seen);
    _take_back_mark($step, $p, $o, $seen, _identity($o->{pid}));
    return ('again');
}

# Whether another writer's mark $seen holds nobody: that writer is provably
# dead on this host, or the mark's lease ended.
sub _mark_is_over {
    my ($seen) = @_;
    my ($stale, undef, $owner) = _judge($seen, 0);
    return $stale || (defined $owner && $owner eq 'dead');
}

# Unmarks another writer's mark $seen whose writer is gone or whose lease
# ended: a group cover again (a fresh nonce), freed by the last one out's
# steps when no live entry is in it.
sub _take_back_mark {
    my ($step, $p, $o, $seen, $id) = @_;
    my $to = _shared_name(_later($seen, 0), $id, 1, $seen->{shared}{limit});
    if (!rename("$p->{dir}/$seen->{name}", "$p->{dir}/$to")) {
        return if $!{ENOENT};
        die _system_error($step, $p->{dir}, "cannot take back the mark $seen->{name}, whose writer is gone or whose "
              . 'lease ended', $! + 0);
    }
    _after_leave($step, $p, $o, 0);
}

# Makes this process's copy of the lone share $seen in its token: false
# when the name is gone, or when something is at the copy's name already
# (another maker drew the same half nonce): no copy of ours, so nothing
# else is made, and the caller looks again.
sub _make_copy {
    my ($step, $p, $seen, $copy) = @_;
    return 1 if mkdir("$p->{dir}/$seen->{name}/$copy", 0700);
    return 0 if $!{EEXIST} || $!{ENOENT} || $!{ENOTDIR};
    die _system_error($step, $p->{dir}, "cannot make the copy $copy of the lone share in the token $seen->{name}", $! + 0);
}

# Makes this process's entry in the token at $name; dies on a plant at its
# unique name. False when the name is gone.
sub _make_mine {
    my ($step, $p, $name, $mine) = @_;
    return 1 if mkdir("$p->{dir}/$name/$mine", 0700);
    return 0 if $!{ENOENT} || $!{ENOTDIR};
    die _lock_error('lock_corrupt', $step, $p->{dir},
        "something is already at the share entry $mine in the token $name, a name unique to this process: "
          . 'someone planted it; nothing was removed')
      if $!{EEXIST};
    die _system_error($step, $p->{dir}, "cannot make the share entry $mine in the token $name", $! + 0);
}

# The conversion of a live lone share into a group cover.
sub _convert {
    my ($step, $p, $o, $seen) = @_;
    my ($d, $why) = _token_dir($step, $p, $seen->{name}, $o);
    return ('again') if $d eq 'gone';
    return ('busy', 'held by ' . _what_holds($seen) . "; no share can join it: $why") if $d ne 'dir';
    my $id = _identity($o->{pid});
    my $theirs = _copy_of($seen, $id);
    return ('again') unless _make_copy($step, $p, $seen, $theirs);
    my $expiry = _now_us() + $o->{lease_us};
    my $mine = _my_entry($expiry, $id);
    my $made = eval { _make_mine($step, $p, $seen->{name}, $mine) };
    if (!$made) {
        my $err = $@;
        my $ok = eval { _take_back($step, $p, $o, [$theirs]); 1 };
        die $err if ref $err;
        die $@ unless $ok;
        return ('again');
    }
    my $cover = _shared_name(_later($seen, $expiry), $id, 1, $o->{limit});
    return ('acquired', $cover, $expiry, 0, $mine) if rename("$p->{dir}/$seen->{name}", "$p->{dir}/$cover");
    die _system_error($step, $p->{dir}, "cannot rename $seen->{name} to the group cover $cover", $! + 0) unless $!{ENOENT};
    # Whoever renamed it first, neither entry is a share: a winning
    # converter relies on its own copy only.
    _take_back($step, $p, $o, [$mine, $theirs]);
    return ('again');
}

# Joining a group cover: counted first when it is a semaphore's.
sub _join {
    my ($step, $p, $o, $seen) = @_;
    my ($d, $why) = _token_dir($step, $p, $seen->{name}, $o);
    return ('again') if $d eq 'gone';
    return ('busy', 'held by ' . _what_holds($seen) . "; no share can join it: $why") if $d ne 'dir';
    my $list = _list_token($step, $p, $seen->{name}, $o) or return ('again');
    my $n = @{ $list->{live} };
    return ("busy", "full: the semaphore of $o->{limit} has $n holders with live leases") if $o->{limit} && $n >= $o->{limit};
    my $id = _identity($o->{pid});
    my $expiry = _now_us() + $o->{lease_us};
    my $mine = _my_entry($expiry, $id);
    return ('again') unless _make_mine($step, $p, $seen->{name}, $mine);
    my $cover = _shared_name(_later($seen, $expiry), $id, 1, $o->{limit});
    return ('acquired', $cover, $expiry, 0, $mine) if rename("$p->{dir}/$seen->{name}", "$p->{dir}/$cover");
    die _system_error($step, $p->{dir}, "cannot rename the group cover $seen->{name} to $cover", $! + 0) unless $!{ENOENT};
    _take_back($step, $p, $o, [$mine]);
    return ('again');
}

# The last one out (docs/protocol.md, Shared locks and semaphores: Leaving a group): when the cover
# holds no live entry, its stale entries are removed and it is freed, or
# handed to its writer. $was_full: this process left a semaphore it had
# counted full, and renames the cover so that the waiters watching D wake.
sub _after_leave {
    my ($step, $p, $o, $was_full) = @_;
    for (1 .. 100) {
        my $obs = _observe($step, $p);
        return unless $obs->{kind} eq 'held' && _is_cover($obs->{token});
        my $seen = $obs->{token};
        my ($d) = _token_dir($step, $p, $seen->{name}, $o);
        return if $d eq 'no';
        my $list = _list_token($step, $p, $seen->{name}, $o) or next;
        if (@{ $list->{live} }) {
            my $s = $seen->{shared};
            rename("$p->{dir}/$seen->{name}", "$p->{dir}/" . _cover_after($seen, _identity($o->{pid}), 0))
              if $was_full && $s->{kind} == 1 && $s->{limit} && @{ $list->{live} } == $s->{limit} - 1;
            return;
        }
        _corrupt_entries($step, $p, $seen->{name}, $list) if @{ $list->{malformed} };
        _remove_entries($step, $p, $seen->{name}, map { $_->{entry} } @{ $list->{stale} });
        my $to = $seen->{shared}{kind} == 1 ? $FREE : _handover_of($seen);
        return if rename("$p->{dir}/$seen->{name}", "$p->{dir}/$to");
        die _system_error($step, $p->{dir}, "cannot rename the empty cover $seen->{name} to $to", $! + 0) unless $!{ENOENT};
    }
}

# ---------------------------------------------------------------------------
# A writer that finds shared holders (docs/protocol.md, Shared locks and semaphores: A writer)

# One look of an exclusive acquisition at a shared name $seen: ('acquired',
# ...) through $take, ('again'), ('busy', reason), or () when the name is
# judged as a token is (a stale lone share, a reserved kind). $o->{mark}:
# this writer's draining cover ({nonce, renamed}), once it marked.
sub _writer_look {
    my ($step, $p, $o, $seen, $take) = @_;
    my $s = $seen->{shared};
    return () if $s->{kind} > 2 || ($s->{kind} == 0 && (_judge($seen, 0))[0]);
    my $id = _identity($o->{pid});
    # A single try never waits, and a sleeper in the line leaves marking
    # to the head.
    my $marks = (!defined $o->{wait_us} || $o->{wait_us} > 0) && !$o->{sleeper};
    if ($s->{kind} == 0) {
        return ('busy', 'held by ' . _what_holds($seen)) unless $marks;
        my ($d, $why) = _token_dir($step, $p, $seen->{name}, $o);
        return ('again') if $d eq 'gone';
        return ('busy', 'held by ' . _what_holds($seen) . "; it cannot be marked: $why") if $d ne 'dir';
        my $theirs = _copy_of($seen, $id);
        return ('again') unless _make_copy($step, $p, $seen, $theirs);
        return ('busy', 'held by ' . _what_holds($seen) . '; this writer marked it and waits') if _mark($step, $p, $o, $seen, $id);
        # Not marked: the copy is nobody's share, whoever renamed the name.
        _take_back($step, $p, $o, [$theirs]);
        return ('again');
    }
    my $own = $s->{kind} == 2 && $o->{mark} && $seen->{nonce} eq $o->{mark}{nonce} && $seen->{host_tag} eq $id->{host_tag}
      && $seen->{pid} == $id->{pid};
    return ('busy', 'held by ' . _what_holds($seen)) if $s->{kind} == 2 && !$own && !_mark_is_over($seen);
    my ($d, $why) = _token_dir($step, $p, $seen->{name}, $o);
    return ('again') if $d eq 'gone';
    return ('busy', 'held by ' . _what_holds($seen) . "; $why") if $d ne 'dir';
    my $list = _list_token($step, $p, $seen->{name}, $o) or return ('again');
    if (!@{ $list->{live} }) {
        _corrupt_entries($step, $p, $seen->{name}, $list) if @{ $list->{malformed} };
        return $take->($seen, 'a cover with no live share in it');
    }
    my $n = @{ $list->{live} } . ' shared holder' . (@{ $list->{live} } == 1 ? '' : 's');
    # So that the token does not collect the entries of readers killed
    # with kill -9; one that cannot be removed is the last one out's to report.
    eval { _remove_entries($step, $p, $seen->{name}, map { $_->{entry} } @{ $list->{stale} }); 1 } if @{ $list->{stale} };
    if ($own) {
        _renew_mark($step, $p, $o, $seen, $id);
        return ('busy', "held by $n; this writer marked the lock and waits for them to leave");
    }
    if ($s->{kind} == 2) {
        _take_back_mark($step, $p, $o, $seen, $id);
        return ('again');
    }
    return ('busy', "held by $n; this writer marked the lock and waits for them to leave") if $marks && _mark($step, $p, $o, $seen, $id);
    return ('busy', "held by $n") unless $marks;
    return ('again');
}

# Renames the lone share or group cover $seen to this writer's draining
# cover; false when the name changed meanwhile.
sub _mark {
    my ($step, $p, $o, $seen, $id) = @_;
    my $nonce = _nonce($id);
    my $mark = _shared_name(_later($seen, _now_us() + $o->{lease_us}), $id, 2, $seen->{shared}{limit}, $nonce);
    if (rename("$p->{dir}/$seen->{name}", "$p->{dir}/$mark")) {
        $o->{mark} = { nonce => $nonce, renamed => _steady_us(), limit => $seen->{shared}{limit} };
        return 1;
    }
    die _system_error($step, $p->{dir}, "cannot rename $seen->{name} to the writer's mark $mark", $! + 0) unless $!{ENOENT};
    return 0;
}

# A waiting writer keeps its mark at least a third of its lease ahead, so
# that the hand-over name is never born expired.
sub _renew_mark {
    my ($step, $p, $o, $seen, $id) = @_;
    return if _steady_us() - $o->{mark}{renamed} < $o->{lease_us} / 3;
    my $to = _cover_after($seen, $id, _now_us() + $o->{lease_us});
    $o->{mark}{renamed} = _steady_us() if rename("$p->{dir}/$seen->{name}", "$p->{dir}/$to");
}

# The hand-over name of this writer's mark: its exclusive token, which it
# holds from the last one out's rename on.
sub _handed_over {
    my ($o, $seen, $id) = @_;
    return $o->{mark} && !$seen->{shared} && !$seen->{legacy} && $seen->{nonce} eq $o->{mark}{nonce}
      && $seen->{host_tag} eq $id->{host_tag} && $seen->{pid} == $id->{pid} && $seen->{start} eq $id->{start};
}

# A writer whose wait ended unmarks (a group cover again, a new nonce);
# a mark already handed over is held: returns the acquisition then, via
# $take, else ().
sub _drop_mark {
    my ($step, $p, $o, $take) = @_;
    my $id = _identity($o->{pid});
    for (1 .. 100) {
        my $obs = _observe($step, $p);
        return () unless $obs->{kind} eq 'held';
        my $seen = $obs->{token};
        if (_handed_over($o, $seen, $id)) {
            my ($what, @r) = $take->($seen);
            return @r if $what eq 'acquired';
            next;
        }
        my $s = $seen->{shared};
        return () unless $s && $s->{kind} == 2 && $seen->{nonce} eq $o->{mark}{nonce} && $seen->{pid} == $id->{pid};
        return () if rename("$p->{dir}/$seen->{name}", "$p->{dir}/" . _shared_name(_later($seen, 0), $id, 1, $s->{limit}));
        die _system_error($step, $p->{dir}, "cannot unmark our mark $seen->{name}", $! + 0) unless $!{ENOENT};
    }
    return ();
}

# ---------------------------------------------------------------------------
# A shared hold: release and refresh. $self: the lock object (lockdir,
# token, entry for a group member, expiry, limit, pid, chosen, group).

sub _share_lost {
    my ($self, $step, $why) = @_;
    $self->{held} = 0;
    return _lock_error('lock_lost', $step, $self->{lockdir},
        "the lock does not hold our share $self->{token} any more: $why (our lease ended at "
          . _utc($self->{expiry}) . ', or our process was judged dead); the other holders were left alone');
}

# The names in the token now named $name that are our share: our entry,
# or, for a lone share whose name is gone, its copies in the cover that a
# converter or a marking writer made (one, once the losers removed theirs).
sub _our_names {
    my ($step, $p, $name, $self) = @_;
    return ($self->{entry}) if $self->{entry};
    my (undef, $t) = _classify($self->{token});
    my $dh;
    if (!opendir($dh, "$p->{dir}/$name")) {
        return () if $!{ENOENT} || $!{ENOTDIR} || $!{ESTALE};
        die _system_error($step, $p->{dir}, "cannot list the token $name for the copies of our share", $! + 0);
    }
    my @copies = grep { _is_copy_of($_, $t) } _names($dh);
    closedir $dh;
    return @copies;
}

sub _release_share {
    my ($self) = @_;
    my $step = 'release';
    my $p = _lock_paths($step, $self->{lockdir});
    if (!$self->{entry}) {
        if (rename("$p->{dir}/$self->{token}", "$p->{dir}/$FREE")) {
            $self->{held} = 0;
            return 1;
        }
        die _system_error($step, $p->{dir}, "cannot rename our lone share $self->{token} to lockfile", $! + 0)
          unless $!{ENOENT};
    }
    _leave($step, $p, $self);
    return 1;
}

# Leaving a group: our entry (or every copy of our converted lone share)
# removed from the token, whatever its name is by now; then the last one
# out's steps.
sub _leave {
    my ($step, $p, $self) = @_;
    my $gone = $self->{entry} ? 'its entry was removed as stale' : 'it was taken over (the cover holds no copy of it)';
    my $left = 0;
    for my $try (1 .. 100) {
        my $obs = _observe($step, $p);
        die _share_lost($self, $step, $self->{entry} ? 'no group cover holds it' : 'it was taken over')
          unless $obs->{kind} eq 'held' && _is_cover($obs->{token});
        my ($d) = _token_dir($step, $p, $obs->{token}{name}, $self);
        next if $d eq 'gone';
        die _share_lost($self, $step, 'the token is no directory') if $d ne 'dir';
        my $tok = "$p->{dir}/$obs->{token}{name}";
        my @missed;
        for my $e (_our_names($step, $p, $obs->{token}{name}, $self)) {
            if (rmdir "$tok/$e") { $left = 1; next }
            die _system_error($step, $p->{dir}, "cannot remove our share entry $e", $! + 0) unless $!{ENOENT};
            push @missed, $e;
        }
        # The cover renamed after the listing: every copy must go, wherever
        # the token is by now.
        _undo_entries($step, $p, $self, \@missed) if $left && @missed;
        last if $left;
        die _share_lost($self, $step, $gone) if lstat $tok;
    }
    die _share_lost($self, $step, 'the token kept changing names, and our share was not found in it') unless $left;
    $self->{held} = 0;
    _after_leave($step, $p, $self, $self->{limit} ? 1 : 0);
}

sub _refresh_share {
    my ($self, $lease_us) = @_;
    my $step = 'refresh';
    my $p = _lock_paths($step, $self->{lockdir});
    my $want = _now_us() + $lease_us;
    if (!$self->{entry}) {
        my (undef, $t) = _classify($self->{token});
        (my $rest = $self->{token}) =~ s/\Alockfile\.[0-9]+\.//;
        my $next = "$FREE." . _later($t, $want) . ".$rest";
        if (rename("$p->{dir}/$self->{token}", "$p->{dir}/$next")) {
            @$self{qw(token expiry lease_us)} = ($next, _later($t, $want), $lease_us);
            return $next;
        }
        die _system_error($step, $p->{dir}, "cannot rename our lone share $self->{token} to $next", $! + 0) unless $!{ENOENT};
    }
    return _refresh_member($step, $p, $self, $want, $lease_us);
}

# A group member's refresh: a new entry of its own, (for a semaphore) the
# count, the cover renamed to cover it, the old entry (or the copies of a
# converted lone share) removed.
sub _refresh_member {
    my ($step, $p, $self, $want, $lease_us) = @_;
    my $id = _identity($self->{pid});
    my ($new, $made, @old) = (_my_entry($want, $id), 0);
    my $ended = sub {
        my $lost = _share_lost($self, $step, $_[0]);
        eval { _take_back($step, $p, $self, [$made ? ($new) : (), $self->{entry} ? ($self->{entry}) : @old]) };
        die $lost;
    };
    for (1 .. 100) {
        my $obs = _observe($step, $p);
        $ended->('no group cover holds it') unless $obs->{kind} eq 'held' && _is_cover($obs->{token});
        my $seen = $obs->{token};
        my ($d) = _token_dir($step, $p, $seen->{name}, $self);
        next if $d eq 'gone';
        $ended->('the token is no directory') if $d ne 'dir';
        @old = _our_names($step, $p, $seen->{name}, $self);
        if (!@old) {
            next unless lstat "$p->{dir}/$seen->{name}";
            $ended->('it was taken over (the cover holds no copy of it)');
        }
        if (!$made) {
            _make_mine($step, $p, $seen->{name}, $new) or next;
            $made = 1;
        }
        # Only a share whose lease may have ended can have been counted out
        # by a joiner; counting a live one would count joiners whose rename
        # is still to come, and end a share for nothing.
        if ($self->{limit} && _now_us() > $self->{expiry} - $SKEW_US) {
            my $list = _list_token($step, $p, $seen->{name}, $self) or next;
            my %ours = map { $_ => 1 } $new, @old;
            my $others = grep { !$ours{ $_->{entry} } } @{ $list->{live} };
            $ended->("the semaphore of $self->{limit} is full with others, one of them in our slot after our lease ended")
              if $others >= $self->{limit};
        }
        if (!rename("$p->{dir}/$seen->{name}", "$p->{dir}/" . _cover_after($seen, $id, $want))) {
            next if $!{ENOENT};
            die _system_error($step, $p->{dir}, "cannot rename the cover $seen->{name} to cover our new lease", $! + 0);
        }
        _undo_entries($step, $p, $self, \@old);
        @$self{qw(entry token expiry lease_us)} = ($new, $new, $want, $lease_us);
        return $new;
    }
    $ended->('the cover kept changing names');
}

# ---------------------------------------------------------------------------
# Who holds a lock: the token, or every share in a cover and its writer

# The holders of the token $t (parsed): hashes of holder()'s fields with
# mode, slots and waiting_writer.
sub _holders_of {
    my ($step, $p, $t, $o) = @_;
    my $s = $t->{shared};
    my $one = sub {
        my ($h, $mode, $waiting) = @_;
        my ($stale, $reason, $owner) = _judge($h, $o->{legacy_timeout_us});
        return { %$h, mode => $mode, slots => $s ? $s->{limit} : 0, waiting_writer => $waiting ? 1 : 0,
            stale => $stale ? 1 : 0, reason => $reason, owner => defined $owner ? $owner : 'unknown' };
    };
    return ($one->($t, 'exclusive')) unless $s && $s->{kind} <= 2;
    return ($one->($t, 'shared')) if $s->{kind} == 0;
    my @h;
    my ($d) = _token_dir($step, $p, $t->{name}, $o);
    my $list = $d eq 'dir' ? _list_token($step, $p, $t->{name}, $o) : undef;
    if ($list) {
        # The copies of a converted lone share (the same but for the last
        # half of the nonce, their makers' own) are one share, its holder's.
        my %seen;
        for my $e (sort { $a->{entry} cmp $b->{entry} } @{ $list->{live} }, @{ $list->{stale} }) {
            push @h, $one->($e, 'shared') unless $seen{ substr($e->{entry}, 0, -8) }++;
        }
    }
    push @h, $one->($t, 'exclusive', 1) if $s->{kind} == 2;
    return @h;
}

1;
