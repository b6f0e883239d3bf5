package Tokenlock::Protocol;

# Acquiring, natively: the protocol of docs/protocol.md in plain Perl. Every
# step is a rename(2) of a name this process saw; no process is started.
# Core Perl has no renameat or openat, so every call names its path: the
# lock directory is judged by lstat before each acquisition instead of
# once through a descriptor.

use strict;
use warnings;

use Tokenlock::Error qw(_error _lock_error _system_error);
use Tokenlock::System qw(_identity _native_setup _now_us _sleep_us _steady_us);
use Tokenlock::Token qw(_judge _make_token);
use Tokenlock::Trust qw(_check_dir);
use Tokenlock::Directory qw(_clear_token _create_dir _lock_paths _observe _sweep_leftovers);
use Tokenlock::Marks qw(_mark_and_check _needs_marks);
use Tokenlock::Shared qw(_drop_mark _handed_over _lone_name _reader_look _writer_look);
use Tokenlock::Turnstile qw(_line_hungry _open_turnstile _set_mark _turnstile_usable);

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

# The turnstile (docs/waiting-turnstile.md): the head polls every 1 ms and,
# hungry after 1 ms, every 100 us; sleepers retry its flock after 16 ms,
# halving for every 25 ms waited down to 2 ms, and look at the lock
# themselves every 100 ms.
my $HEAD_US         = 1000;
my $HUNGRY_AFTER_US = 1000;
my $HUNGRY_POLL_US  = 100;
my $SLEEPER_US      = 16_000;
my $AGE_US          = 25_000;
my $SLEEPER_MIN_US  = 2000;
my $OWN_LOOK_US     = 100_000;

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
    my $token = $o->{shared} ? _lone_name($expiry, $id, $o->{limit}) : _make_token($expiry, $id);
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
    my $take = sub { _take_over($step, $p, $o, $id, @_) };
    my @r = $o->{shared} ? _reader_look($step, $p, $o, $seen, $take)
      : $seen->{shared} ? _writer_look($step, $p, $o, $seen, $take)
      : _handed_over($o, $seen, $id) ? $take->($seen) : ();
    if (!@r) {
        my ($stale, $reason) = _judge($seen, $o->{legacy_timeout_us});
        @r = $stale ? $take->($seen, $reason) : ('busy', $reason);
    }
    # Nothing else looks at the parent once the lock directory exists,
    # and a waiter has time to spare.
    _sweep_leftovers($p) if $r[0] eq 'busy' && int(rand(32)) == 0;
    return @r;
}

# Takes the name $seen over: exactly the name judged, so that if its owner
# refreshed or released it, or another taker was first, the name is gone
# and the rename fails without touching anyone's token. A writer's
# hand-over name is taken the same way, without clearing: it is ours.
# A shared holder takes the name as a writer's token of its own first, and
# renames that to its lone share once _finish cleared it: a lone share can
# be joined the moment it appears, and a clearing after that would remove
# the joiner's entries, its copy of our share among them.
sub _take_over {
    my ($step, $p, $o, $id, $seen, $reason) = @_;
    my $expiry = _now_us() + $o->{lease_us};
    my $token = _make_token($expiry, $id);
    my $ours = _handed_over($o, $seen, $id);
    if (!rename("$p->{dir}/$seen->{name}", "$p->{dir}/$token")) {
        return ('again') if $!{ENOENT};
        die _system_error('take over', $p->{dir}, "cannot rename stale token $seen->{name} ($reason)", $! + 0)
          unless $ours;
        die _system_error($step, $p->{dir}, "cannot rename the token $seen->{name} handed over to us", $! + 0);
    }
    my @r = _finish($step, $p, $o, $token, $expiry, $ours ? undef : $seen->{name});
    return @r unless $o->{shared} && $r[0] eq 'acquired';
    my $lone = _lone_name($expiry, $id, $o->{limit});
    return ('acquired', $lone, $expiry, $r[3]) if rename("$p->{dir}/$token", "$p->{dir}/$lone");
    my $errno = $! + 0;
    rename("$p->{dir}/$token", "$p->{dir}/$FREE");    # not left held
    die _system_error('take over', $p->{dir}, "cannot rename our token $token to our lone share", $errno);
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
    # The token is ours under one name: a mark this writer made is gone.
    delete $o->{mark};
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
    my @r = eval { _acquire_waiting($step, $p, $o) };
    return @r if @r;
    my $err = $@;
    die $err unless $o->{mark};
    # A writer whose wait ended takes its mark off again, unless the last
    # shared holder has handed the lock over meanwhile: then it holds it,
    # a success at the deadline. A wait that failed otherwise gives a lock
    # handed over back at once.
    my $id = _identity($o->{pid});
    my $waited = ref $err && ($err->code eq 'busy' || $err->code eq 'timed_out');
    @r = eval { _drop_mark($step, $p, $o, sub { _take_over($step, $p, $o, $id, @_) }) };
    return @r if @r && $waited;
    rename("$p->{dir}/$r[0]", "$p->{dir}/$FREE") if @r;
    die $err;
}

sub _acquire_waiting {
    my ($step, $p, $o) = @_;
    die _error(code => 'not_supported', status => 69, message => "tokenlock: $step $p->{dir}: shared locks and "
          . 'semaphores are refused on a filesystem where holders leave owner marks (GlusterFS, an unknown FUSE '
          . 'filesystem: docs/protocol.md, Owner marks); take the lock exclusively there, or keep it on a local or NFS '
          . 'filesystem')
      if $o->{shared} && _needs_marks($p);
    my ($first, $line) = (1, 0);
    # The directory is judged before anything in it is touched. A missing
    # one is created by the first look. When it is there, the first rename
    # comes before the clocks and the loops below, which only a busy lock
    # needs. A hungry mark means a head is owed the next release: this
    # process lines up behind it instead (a single try never waits, so it
    # tries).
    if (_check_dir($step, $p, $o)) {
        my $try = (defined $o->{wait_us} && $o->{wait_us} == 0) || !_line_hungry($p);
        if ($try) {
            my ($what, @r) = _round($step, $p, $o, 0, 1);
            return @r if $what eq 'acquired';
            $first = 0;
            # A reader that can join does not line up: it looks at once.
            if ($o->{shared}) {
                ($what, @r) = ('again');
                for (1 .. 100) {
                    ($what, @r) = _round($step, $p, $o, 1, 0);
                    last unless $what eq 'again';
                }
                return @r if $what eq 'acquired';
            }
        }
        $line = !defined $o->{wait_us} || $o->{wait_us} > 0;
    }
    my $start = _steady_us();
    my $deadline = defined $o->{wait_us} ? $start + $o->{wait_us} : undef;
    if ($line && _turnstile_usable($p)) {
        my $gid = exists $o->{chosen} ? $o->{chosen} : $o->{group};
        my $fh = _open_turnstile($p, $gid, !$first);
        if ($fh) {
            my @r = _in_line($step, $p, $o, $fh, $start, $deadline);
            return @r if @r;
            $first = 0;
        }
    }
    return _poll($step, $p, $o, $first, $deadline);
}

# The verdict of a wait that ends without the lock.
sub _give_up {
    my ($p, $o, $reason) = @_;
    my $why = 'the lock is ' . (defined $reason ? $reason : 'changing hands too fast to see who holds it');
    die _lock_error('busy', 'acquire', $p->{dir}, $why) if defined $o->{wait_us} && $o->{wait_us} == 0;
    die _lock_error('timed_out', 'acquire', $p->{dir}, 'timed out after ' . int($o->{wait_us} / 1000) . " ms; $why");
}

# Waiting where there is no turnstile to use: every waiter polls, with
# backoff.
sub _poll {
    my ($step, $p, $o, $first, $deadline) = @_;
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
        _give_up($p, $o, $reason) if $final || (defined $o->{wait_us} && $o->{wait_us} == 0);
        _sleep_to(int($delay * (0.75 + rand(0.5))), $deadline);
        $delay *= 2;
        $delay = $BACKOFF_MAX_US if $delay > $BACKOFF_MAX_US;
    }
}

# Sleeps $us microseconds, or until $until (steady) if that comes first.
sub _sleep_to {
    my ($us, $until) = @_;
    if (defined $until) {
        my $left = $until - _steady_us();
        $us = $left if $left < $us;
    }
    _sleep_us(int $us);
}

# Waiting in the turnstile (docs/waiting-turnstile.md, The line): a
# sleeper tries the turnstile's flock without blocking, less long between
# tries the longer it has waited, and looks at the lock itself every
# $OWN_LOOK_US and at its deadline; whoever holds the flock is the head.
# Returns the acquisition, or () when the turnstile failed and the caller
# is to poll.
sub _in_line {
    my ($step, $p, $o, $fh, $start, $deadline) = @_;
    my $reason;
    my $own_look = $start + $OWN_LOOK_US;
    while (1) {
        if (flock($fh, Fcntl::LOCK_EX() | Fcntl::LOCK_NB())) {
            my ($what, @r) = _head($step, $p, $o, $fh, $deadline);
            return @r if $what eq 'acquired';
            _give_up($p, $o, $r[0]);
        }
        # A flock that fails otherwise than by being held (ENOLCK): polling.
        return () unless $!{EWOULDBLOCK} || $!{EAGAIN};
        my $now = _steady_us();
        my $final = defined $deadline && $now >= $deadline;
        if ($final || $now >= $own_look) {
            $own_look = $now + $OWN_LOOK_US;
            my ($what, @r) = ('again');
            # On one host a writer marks only as the head of the line.
            local $o->{sleeper} = 1;
            ($what, @r) = _round($step, $p, $o, 1, 0) while $what eq 'again';
            return @r if $what eq 'acquired';
            $reason = $r[0] if defined $r[0];
            _give_up($p, $o, $reason) if $final;
        }
        my $halvings = int(($now - $start) / $AGE_US);
        my $pause = $halvings > 30 ? 0 : $SLEEPER_US >> $halvings;
        $pause = $SLEEPER_MIN_US if $pause < $SLEEPER_MIN_US;
        $pause = $own_look - $now if $own_look - $now < $pause;
        _sleep_to($pause, $deadline);
    }
}

# The head: alone polls the lock, every $HEAD_US, and every $HUNGRY_POLL_US
# once it has set the hungry mark, $HUNGRY_AFTER_US after becoming head (a
# mark found set was left by a head that died: it is this head's). It
# leaves the turnstile as soon as it holds the lock, gives up or fails, so
# that the next head is in place while the lock is held. Returns
# ('acquired', ...) or ('timed_out', reason).
sub _head {
    my ($step, $p, $o, $fh, $deadline) = @_;
    my $since = _steady_us();
    my @st = stat $fh;
    my $hungry = @st && $st[7] > 0;
    my ($last_look, $reason, @got);
    my $ok = eval {
        while (1) {
            my $now = _steady_us();
            my $final = defined $deadline && $now >= $deadline;
            my $look = $final || !defined $last_look || $now - $last_look >= $LOOK_EVERY_US;
            $last_look = $now if $look;
            my ($what, @r) = _round($step, $p, $o, $look, 0);
            if ($what eq 'acquired') { @got = ('acquired', @r); last }
            next if $what eq 'again';
            $reason = $r[0] if defined $r[0];
            if ($final) { @got = ('timed_out', $reason); last }
            $hungry = _set_mark($fh, 1) if !$hungry && $now - $since >= $HUNGRY_AFTER_US;
            _sleep_to($hungry ? $HUNGRY_POLL_US : $HEAD_US, $deadline);
        }
        1;
    };
    my $err = $@;
    _set_mark($fh, 0) if $hungry;
    flock($fh, Fcntl::LOCK_UN());
    die $err unless $ok;
    return @got;
}

1;
