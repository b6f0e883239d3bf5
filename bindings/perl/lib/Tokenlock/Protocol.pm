package Tokenlock::Protocol;

# Acquiring, natively: the protocol of docs/protocol.md in plain Perl. Every
# step is a rename(2) of a name this process saw; no process is started.
# Core Perl has no renameat or openat, so every call names its path: the
# lock directory is judged by lstat before each acquisition instead of
# once through a descriptor.

use strict;
use warnings;

use Tokenlock::Error qw(_lock_error _system_error);
use Tokenlock::System qw(_identity _native_setup _now_us _sleep_us _steady_us);
use Tokenlock::Token qw(_judge _make_token);
use Tokenlock::Trust qw(_check_dir);
use Tokenlock::Directory qw(_clear_token _create_dir _lock_paths _observe _sweep_leftovers);
use Tokenlock::Marks qw(_mark_and_check _needs_marks);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_native_acquire);

# The protocol's constants, copied from Tokenlock::Token: never changed.
my $FREE = $Tokenlock::Token::FREE;

# Waiting: exponential backoff with +-25 % jitter, a look at the holder at
# most this often (and always on the last round).
my $BACKOFF_MIN_US = 100;
my $BACKOFF_MAX_US = 50_000;
my $LOOK_EVERY_US  = 10_000;

# One round of the protocol: the fast-path rename, then, when $look is
# set, a look at the directory and a creation or takeover if it needs one.
# Returns ('acquired', token, expiry, marked), ('again'), or ('busy',
# reason). $o->{given_up}: tokens of ours that a rename made ours but the
# owner mark did not confirm; should one show up under our name again, it
# is ours to confirm, not a live holder's to wait for.
sub _round {
    my ($step, $p, $o, $look, $first) = @_;
    my $id = _identity($o->{pid});
    my $expiry = _now_us() + $o->{lease_us};
    my $token = _make_token($expiry, $id);
    my $mine = "$p->{dir}/$token";
    # After the first round a lookup, which takes no lock, tells whether a
    # rename, which locks the directory, can succeed.
    my $try = $first || -e "$p->{dir}/$FREE";
    if ($try) {
        return _finish($step, $p, $o, $token, $expiry, undef) if rename("$p->{dir}/$FREE", $mine);
        my $errno = $! + 0;
        if (!$!{ENOENT}) {
            die _system_error($step, $p->{dir}, "cannot rename lockfile to $token", $errno)
              unless $!{EPERM};
            my @st = lstat "$p->{dir}/$FREE";
            die _system_error($step, $p->{dir}, "cannot rename lockfile to $token", $errno,
                (-k $p->{dir} && @st)
                ? "lock directory $p->{dir} is sticky and the token belongs to uid $st[4] (we are uid $>); "
                  . 'use a non-sticky directory shared by the users that lock'
                : 'the filesystem or a file attribute forbids this rename; a sticky directory only lets the '
                  . "token's owner rename it");
        }
        # An NFS client may retransmit a rename whose reply was lost.
        return _finish($step, $p, $o, $token, $expiry, undef) if lstat $mine;
    }
    return ('busy', undef) unless $look;
    if (!_check_dir($step, $p, $o)) {
        _create_dir($step, $p, $o->{lease_us}, $o->{group});
        return ('again');
    }
    my $obs = _observe($step, $p);
    if ($obs->{kind} eq 'missing' || $obs->{kind} eq 'empty') {
        _create_dir($step, $p, $o->{lease_us}, $o->{group});
        return ('again');
    }
    return ('again') if $obs->{kind} eq 'free';
    my $seen = $obs->{token};
    return _finish($step, $p, $o, $seen->{name}, $seen->{expiry_us}, undef) if $o->{given_up}{ $seen->{name} };
    my ($stale, $reason) = _judge($seen, $o->{legacy_timeout_us});
    if (!$stale) {
        # Nothing else looks at the parent once the lock directory exists,
        # and a waiter has time to spare.
        _sweep_leftovers($p) if int(rand(32)) == 0;
        return ('busy', $reason);
    }
    # Exactly the name we judged: if its owner refreshed or released it, or
    # another taker was first, the name is gone and the rename fails
    # without touching anyone's token.
    $expiry = _now_us() + $o->{lease_us};
    $token  = _make_token($expiry, $id);
    $mine   = "$p->{dir}/$token";
    if (!rename("$p->{dir}/$seen->{name}", $mine)) {
        return ('again') if $!{ENOENT};
        die _system_error('take over', $p->{dir}, "cannot rename stale token $seen->{name} ($reason)", $! + 0);
    }
    return _finish($step, $p, $o, $token, $expiry, $seen->{name});
}

# A rename made $token ours (taking over $taken_from, if defined). Where a
# rename can move a token through a name it no longer has, the owner mark
# confirms it first.
sub _finish {
    my ($step, $p, $o, $token, $expiry, $taken_from) = @_;
    my $marks = _needs_marks($p);
    if ($marks) {
        my ($m, $holder) = _mark_and_check($step, $p, $o, $token, $taken_from);
        if ($m ne 'held') {
            $o->{given_up}{$token} = 1;
            return ('busy', defined $holder ? $holder : 'taken by another client at the same moment');
        }
    }
    if (defined $taken_from) {
        # The previous owner's leftovers, and maybe a creator's that died too.
        _clear_token($p, $token, $marks, $o->{chosen});
        _sweep_leftovers($p);
    }
    return ('acquired', $token, $expiry, $marks);
}

# Acquires natively; returns (token, expiry_us, marked) or dies with busy,
# timed_out or another error. $o: lease_us, legacy_timeout_us, wait_us
# (undef: forever; 0: one try), group; sets $o->{chosen}.
sub _native_acquire {
    my ($step, $lockdir, $o) = @_;
    _native_setup();
    my $p = _lock_paths($step, $lockdir);
    my $first = 1;
    # The directory is judged before anything in it is touched. A missing
    # one is created by the first look. When it is there, the first rename
    # comes before the clocks and the loop below, which only a busy lock
    # needs.
    if (_check_dir($step, $p, $o)) {
        my ($what, @r) = _round($step, $p, $o, 0, 1);
        return @r if $what eq 'acquired';
        $first = 0;
    }
    my $start = _steady_us();
    my $deadline = defined $o->{wait_us} ? $start + $o->{wait_us} : undef;
    my ($delay, $last_look, $reason) = ($BACKOFF_MIN_US, undef, undef);
    while (1) {
        my $now = _steady_us();
        my $final = defined $deadline && $now >= $deadline;
        my $look = $first || $final || !defined $last_look || $now - $last_look >= $LOOK_EVERY_US;
        $last_look = $now if $look;
        my ($what, @r) = _round($step, $p, $o, $look, $first);
        $first = 0;
        return @r if $what eq 'acquired';
        next if $what eq 'again';
        $reason = $r[0] if defined $r[0];
        my $why = 'the lock is ' . (defined $reason ? $reason : 'changing hands too fast to see who holds it');
        die _lock_error('busy', 'acquire', $p->{dir}, $why) if defined $o->{wait_us} && $o->{wait_us} == 0;
        if ($final) {
            die _lock_error('timed_out', 'acquire', $p->{dir},
                'timed out after ' . int($o->{wait_us} / 1000) . " ms; $why");
        }
        my $pause = $delay * (0.75 + rand(0.5));
        $pause = $deadline - _steady_us() if defined $deadline && _steady_us() + $pause > $deadline;
        _sleep_us(int $pause);
        $delay *= 2;
        $delay = $BACKOFF_MAX_US if $delay > $BACKOFF_MAX_US;
    }
}

1;
