package Tokenlock::Lock;

# The lock object (of class Tokenlock) and the functions around it:
# acquire, refresh, release, with_lock, holder, and the release of held
# locks on SIGTERM, SIGINT and SIGHUP. Tokenlock.pm binds the public names
# to these subs.

use strict;
use warnings;

use Tokenlock::Error qw(_error _lock_error _system_error _usage);
use Tokenlock::System qw(_identity _now_us);
use Tokenlock::Token qw(_judge _mark_of _utc);
use Tokenlock::Args qw(_check_opts _lease_us _lock_mode _named_group _path_arg _seconds);
use Tokenlock::Trust qw(_check_dir _chosen_group);
use Tokenlock::Directory qw(_lock_paths _observe);
use Tokenlock::Shared qw(_holders_of _refresh_share _release_share);
use Tokenlock::Protocol qw(_native_acquire);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_acquire _owned _refresh _run_held);

# The protocol's constants, copied from Tokenlock::Token: never changed.
my ($DEFAULT_LEASE, $DEFAULT_LEGACY_TIMEOUT, $FREE) =
  ($Tokenlock::Token::DEFAULT_LEASE, $Tokenlock::Token::DEFAULT_LEGACY_TIMEOUT, $Tokenlock::Token::FREE);

# ---------------------------------------------------------------------------
# SIGTERM, SIGINT and SIGHUP end a process without its destructors or END
# blocks, so its locks would stay held until taken over: at once by a
# process on this host that sees the owner dead, only after the lease
# elsewhere. While the handler of one of them is the default, the module's
# releases the locks this process holds, then lets the signal end the
# process as it would have. A handler of the program's own is left alone.

my %HELD;              # refaddr => the lock object, weakly
my $SIGNALS_PID = 0;   # the process that looked at the handlers
my @STOP_SIGNALS = qw(TERM INT HUP);

sub _held_until_signal {
    my ($lock) = @_;
    require Scalar::Util;
    my $id = $lock->{id} = Scalar::Util::refaddr($lock);
    Scalar::Util::weaken($HELD{$id} = $lock);
    return if $SIGNALS_PID == $lock->{pid};
    $SIGNALS_PID = $lock->{pid};
    for my $sig (@STOP_SIGNALS) {
        my $h = $SIG{$sig};
        $SIG{$sig} = \&_on_stop_signal if !defined $h || $h eq '' || $h eq 'DEFAULT';
    }
}

sub _on_stop_signal {
    my ($sig) = @_;
    for my $lock (grep { defined } values %HELD) {
        next unless $lock->{held} && $lock->{pid} == $$;
        local ($@, $!, $?);
        eval { $lock->release; 1 };
    }
    # Blocked while its handler runs, the signal raised again is delivered
    # on return, with the default action: the process ends by it.
    $SIG{$sig} = 'DEFAULT';
    kill $sig, $$;
}

# ---------------------------------------------------------------------------
# The lock object

sub _acquire {
    my ($class, $step, $lockdir, %opts) = @_;
    _check_opts($step, \%opts, qw(wait lease legacy_timeout group shared slots lock_type));
    _path_arg($step, 'the lock directory', $lockdir);
    my ($shared, $limit, $nb) = _lock_mode($step, \%opts);
    $opts{wait} = 0 if $nb && !defined $opts{wait};
    # $$ is a getpid(2) at each read: read once here.
    my %o = (pid => $$, wait_us => 10_000_000, lease_us => $DEFAULT_LEASE * 1_000_000,
        legacy_timeout_us => $DEFAULT_LEGACY_TIMEOUT * 1_000_000, group => _named_group($step, $opts{group}),
        shared => $shared, limit => $limit);
    if (%opts) {
        my $wait = defined $opts{wait} ? $opts{wait} : 10;
        $o{wait_us} = $wait eq 'forever' ? undef : int(_seconds($step, 'wait', $wait, 1) * 1_000_000);
        $o{lease_us} = _lease_us($step, $opts{lease});
        $o{legacy_timeout_us} = int(1_000_000 * _seconds($step, 'legacy_timeout', $opts{legacy_timeout}, 0))
          if defined $opts{legacy_timeout};
    }
    my ($token, $expiry, $marked, $entry) = _native_acquire($step, $lockdir, \%o);
    # A lock directory this process just made was not judged: its group.
    if (!exists $o{chosen}) {
        my @st = lstat _lock_paths($step, $lockdir)->{dir};
        $o{chosen} = _chosen_group($step, $o{group}, @st ? \@st : undef);
    }
    my $lock = bless {
        lockdir => $lockdir,
        group   => $o{group},
        chosen  => $o{chosen},
        # A shared hold's token is its share: a lone share's name, or a
        # group member's entry in the cover (then also in entry).
        token   => defined $entry ? $entry : $token,
        entry   => $entry,
        shared  => $shared,
        limit   => $limit,
        expiry  => $expiry,
        marked  => $marked,
        lease_us => $o{lease_us},
        pid     => $o{pid},
        held    => 1,
        command => $opts{command},
    }, ref($class) || $class;
    _held_until_signal($lock);
    return $lock;
}

sub acquire {
    my ($class, $lockdir, %opts) = @_;
    return _acquire($class, 'acquire', $lockdir, %opts);
}

sub try_acquire {
    my ($class, $lockdir, %opts) = @_;
    $opts{wait} = 0 unless defined $opts{wait};
    my $lock = eval { _acquire($class, 'acquire', $lockdir, %opts) };
    return $lock if $lock;
    my $err = $@;
    return undef if ref $err && ($err->code eq 'busy' || $err->code eq 'timed_out');
    die $err;
}

sub token   { $_[0]{token} }

sub lockdir { $_[0]{lockdir} }

sub held    { $_[0]{held} && $_[0]{pid} == $$ ? 1 : 0 }

# 'exclusive' or 'shared' (a reader, or a semaphore's holder), and the
# semaphore's size (0: none).
sub mode    { $_[0]{shared} ? 'shared' : 'exclusive' }

sub slots   { $_[0]{limit} || 0 }

sub _owned {
    my ($self, $step) = @_;
    my $why = !$self->{held} ? 'this lock object no longer holds the lock (it was released or lost)'
      : $self->{pid} != $$ ? "the lock belongs to process $self->{pid}, and this is its forked child $$"
      : undef;
    my $what = defined $self->{what} ? $self->{what} : $self->{lockdir};
    die _error(code => 'not_owner', message => "Tokenlock: $step $what: $why") if defined $why;
}

sub refresh {
    my ($self, %opts) = @_;
    _check_opts('refresh', \%opts, qw(lease));
    _owned($self, 'refresh');
    return _refresh($self, _lease_us('refresh', $opts{lease}));
}

sub _refresh {
    my ($self, $lease_us) = @_;
    return _refresh_share($self, $lease_us) if $self->{shared};
    my $p = _lock_paths('refresh', $self->{lockdir});
    my $old = $self->{token};
    my $expiry = _now_us() + $lease_us;
    # The owner part stays; the new expiry makes the name new, so that a
    # taker that judged the old name finds it gone.
    (my $owner = $old) =~ s/\Alockfile\.[0-9]+\.//;
    my $next = "lockfile.$expiry.$owner";
    if (!rename("$p->{dir}/$old", "$p->{dir}/$next")) {
        my $errno = $! + 0;
        if ($!{ENOENT}) {
            # An NFS client may retransmit a rename whose reply was lost.
            if (!lstat "$p->{dir}/$next") {
                $self->{held} = 0;
                die _lost($self, 'refresh');
            }
        }
        else {
            die _system_error('refresh', $p->{dir}, "cannot rename $old to $next", $errno);
        }
    }
    $self->{token}    = $next;
    $self->{expiry}   = $expiry;
    $self->{lease_us} = $lease_us;
    # The mark names the current lease: one naming the old lease would look
    # expired to a process judging it after that lease's end.
    if ($self->{marked}) {
        my $path = "$p->{dir}/$next";
        if (!rename("$path/" . _mark_of($old), "$path/" . _mark_of($next))
            && !($!{ENOENT} && (mkdir("$path/" . _mark_of($next), 0700) || $!{EEXIST})))
        {
            die _system_error('refresh', $p->{dir},
                "the lease was renewed, but our owner mark in $next could not be renamed to match (until a "
                  . 'refresh succeeds, another GlusterFS client may judge it expired at the old lease\'s end)', $! + 0);
        }
    }
    return $next;
}

sub _lost {
    my ($self, $step) = @_;
    return _lock_error('lock_lost', $step, $self->{lockdir},
        "the lock does not hold our token $self->{token} any more: it was taken over by another process "
          . '(our lease ended at ' . _utc($self->{expiry})
          . ', or our process was judged dead); the new owner\'s lock was left alone');
}

sub release {
    my ($self) = @_;
    _owned($self, 'release');
    if ($self->{shared}) {
        # Whatever happens, the share is this object's no more.
        delete $HELD{ $self->{id} } if defined $self->{id};
        return _release_share($self);
    }
    my $p = _lock_paths('release', $self->{lockdir});
    my $path = "$p->{dir}/$self->{token}";
    my $mark = $self->{marked} ? "$path/" . _mark_of($self->{token}) : undef;
    # The next holder of "lockfile" would find our mark and step back.
    if ($self->{marked} && !rmdir($mark) && !$!{ENOENT}) {
        die _system_error('release', $p->{dir}, "cannot remove our owner mark from $self->{token} (the lock is still ours)", $! + 0);
    }
    # Never retried after ENOENT: on GlusterFS a rename through a stale
    # name can move the token of whoever took ours over.
    if (rename($path, "$p->{dir}/$FREE")) {
        $self->{held} = 0;
        delete $HELD{ $self->{id} } if defined $self->{id};
        return 1;
    }
    my $errno = $! + 0;
    if ($!{ENOENT}) {
        $self->{held} = 0;
        die _lost($self, 'release');
    }
    # Still ours: the caller may retry, and DESTROY will. Held without its
    # mark, another client's rename through a stale name could take it.
    my $err = _system_error('release', $p->{dir}, "cannot rename $self->{token} to lockfile", $errno);
    if ($self->{marked} && !mkdir($mark, 0700) && !$!{EEXIST}) {
        $err->{message} .= "; and our owner mark could not be put back ($!): until the release succeeds, "
          . 'another GlusterFS client may take the lock too';
    }
    die $err;
}

sub DESTROY {
    my ($self) = @_;
    # In a forked child, this removes the child's copy of the entry only.
    delete $HELD{ $self->{id} } if defined $self->{id};
    return unless $self->{held} && $self->{pid} == $$;
    # Running the command must not change what the code around us sees,
    # least of all the exit status of a program that is ending.
    local ($@, $!, $?);
    eval { $self->release; 1 }
      or warn "Tokenlock: the lock $self->{lockdir} was still held when its object went away, "
      . "and releasing it failed: $@";
}

# An interpreter thread shares the process: its copy must never release.
sub CLONE_SKIP { 1 }

sub with_lock {
    my ($lockdir, $code, %opts) = @_;
    _usage('with_lock', 'the second argument must be a code reference') unless ref $code eq 'CODE';
    my $lock = _acquire('Tokenlock', 'acquire', $lockdir, %opts);
    return _run_held($lock, $code, wantarray, $lockdir);
}

# Runs $code($lock) in the context $want and releases the lock however it
# ends: the code's error comes out, or, after it returned, a lost lock.
sub _run_held {
    my ($lock, $code, $want, $what) = @_;
    my @r;
    my $ok = eval {
        if ($want) { @r = $code->($lock) }
        elsif (defined $want) { $r[0] = $code->($lock) }
        else { $code->($lock) }
        1;
    };
    if (!$ok) {
        my $err = $@;
        $err = "Tokenlock: with_lock $what: the code died with an empty message\n"
          unless ref $err || length $err;
        if ($lock->held) {
            # The code's own error matters more; a lost lock is still said.
            eval { $lock->release; 1 } or warn $@;
        }
        die $err;
    }
    # Also after the code released or refreshed it through $lock itself.
    # A lost lock dies here: another process may have run the critical
    # section at the same time, and the caller has to know.
    $lock->release if $lock->held;
    return $want ? @r : $r[0];
}

# The holder of a lock directory, judged as an acquisition would judge it:
# undef when the lock is free or its directory missing.
sub holder {
    my ($lockdir, %opts) = @_;
    my $step = 'holder';
    _check_opts($step, \%opts, qw(legacy_timeout group));
    _path_arg($step, 'the lock directory', $lockdir, 1);
    require Time::HiRes;
    require Fcntl;
    require POSIX;
    my $p = _lock_paths($step, $lockdir);
    return undef unless _check_dir($step, $p, { group => _named_group($step, $opts{group}) });
    my $obs = _observe($step, $p);
    return undef unless $obs->{kind} eq 'held';
    my $t = $obs->{token};
    # A cover names whoever renamed it last, which nobody judges: one of
    # its shares is the holder, a live one first.
    if ($t->{shared} && ($t->{shared}{kind} == 1 || $t->{shared}{kind} == 2)) {
        my @h = holders($lockdir, %opts);
        my ($first) = ((grep { !$_->{waiting_writer} && !$_->{stale} } @h), (grep { !$_->{waiting_writer} } @h), @h);
        return $first;
    }
    my $legacy_us = int(1_000_000 *
        (defined $opts{legacy_timeout} ? _seconds($step, 'legacy_timeout', $opts{legacy_timeout}, 0) : $DEFAULT_LEGACY_TIMEOUT));
    my ($stale, $reason, $owner) = _judge($t, $legacy_us);
    my $ends = $t->{legacy} ? $t->{expiry_us} + $legacy_us : $t->{expiry_us};
    return {
        token      => $t->{name},
        path       => "$p->{dir}/$t->{name}",
        expires_us => $ends,
        expires    => _utc($ends),
        host_tag   => $t->{legacy} ? '' : $t->{host_tag},
        same_host  => !$t->{legacy} && $t->{host_tag} eq _identity()->{host_tag} ? 1 : 0,
        pid        => $t->{legacy} ? 0 : $t->{pid},
        start_time => $t->{legacy} ? 0 : $t->{start},
        owner      => defined $owner ? $owner : 'unknown',
        stale      => $stale ? 1 : 0,
        reason     => $reason,
        legacy     => $t->{legacy} ? 1 : 0,
        mode       => $t->{shared} && $t->{shared}{kind} == 0 ? 'shared' : 'exclusive',
        slots      => $t->{shared} && $t->{shared}{kind} == 0 ? $t->{shared}{limit} : 0,
        waiting_writer => 0,
    };
}

# Every holder of a lock directory: one writer, or every shared holder
# and a writer waiting for them to leave; () when it is free or missing.
# Each is a hash of holder()'s fields with mode, slots and waiting_writer.
sub holders {
    my ($lockdir, %opts) = @_;
    my $step = 'holders';
    _check_opts($step, \%opts, qw(legacy_timeout group));
    _path_arg($step, 'the lock directory', $lockdir, 1);
    require Time::HiRes;
    my $p = _lock_paths($step, $lockdir);
    my %o = (group => _named_group($step, $opts{group}), legacy_timeout_us => int(1_000_000 *
        (defined $opts{legacy_timeout} ? _seconds($step, 'legacy_timeout', $opts{legacy_timeout}, 0) : $DEFAULT_LEGACY_TIMEOUT)));
    return () unless _check_dir($step, $p, \%o);
    my $obs = _observe($step, $p);
    return () unless $obs->{kind} eq 'held';
    my $t = $obs->{token};
    return map {
        my $e = $_;
        my $ends = $e->{legacy} ? $e->{expiry_us} + $o{legacy_timeout_us} : $e->{expiry_us};
        +{  token      => defined $e->{entry} ? $e->{entry} : $e->{name},
            path       => "$p->{dir}/$t->{name}" . (defined $e->{entry} ? "/$e->{entry}" : ''),
            expires_us => $ends,
            expires    => _utc($ends),
            host_tag   => $e->{legacy} ? '' : $e->{host_tag},
            same_host  => !$e->{legacy} && $e->{host_tag} eq _identity()->{host_tag} ? 1 : 0,
            pid        => $e->{legacy} ? 0 : $e->{pid},
            start_time => $e->{legacy} ? 0 : $e->{start},
            legacy     => $e->{legacy} ? 1 : 0,
            map { $_ => $e->{$_} } qw(owner stale reason mode slots waiting_writer) }
    } _holders_of($step, $p, $t, \%o);
}

1;
