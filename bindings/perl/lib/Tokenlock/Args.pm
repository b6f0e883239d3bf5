package Tokenlock::Args;

# Checking what callers pass: options, seconds, paths (and their taint
# under perl -T), leases, and the two settings read from the environment,
# TOKENLOCK_DIR_MODE and TOKENLOCK_GROUP. A bad value dies with
# bad_argument before anything is touched.

use strict;
use warnings;

use Tokenlock::Error qw(_usage);
use Tokenlock::Token ();

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_arg_path _check_opts _dir_mode _group_args _lease_us _legacy_timeout _lock_mode _named_group _path_arg
  _seconds _sync _untainted);

# The protocol's constants, copied from Tokenlock::Token: never changed.
my ($DEFAULT_LEASE, $MAX_LEASE_US) = ($Tokenlock::Token::DEFAULT_LEASE, $Tokenlock::Token::MAX_LEASE_US);

my $DIR_MODE     = 0755;

sub _seconds {
    my ($step, $name, $v, $allow_zero) = @_;
    _usage($step, "$name must be a number of seconds, not " . (defined $v ? "\"$v\"" : 'undef'))
      unless defined $v && $v =~ /^(?:\d+(?:\.\d*)?|\.\d+)\z/;
    _usage($step, "$name must be more than 0 seconds") if !$allow_zero && $v == 0;
    return $v;
}

sub _sync {
    my ($step, $v) = @_;
    return 'file_and_dir' unless defined $v;
    _usage($step, "sync must be none, file or file_and_dir, not \"$v\"")
      unless $v eq 'none' || $v eq 'file' || $v eq 'file_and_dir';
    return $v;
}

# Under perl -T a tainted value that reaches rename, mkdir, chmod or exec
# makes perl die with its bare "Insecure dependency" at a line of this
# module, with the operation half done; refused before anything is touched.
# $hide: the value is not shown (a URL may hold a password).
sub _untainted {
    my ($step, $name, $v, $hide) = @_;
    return $v unless ${^TAINT} && defined $v && !ref $v;
    require Scalar::Util;
    return $v unless Scalar::Util::tainted($v);
    _usage($step, "$name" . ($hide ? '' : " \"$v\"") . ' is tainted (perl -T: it comes from outside the program, such as %ENV, '
          . '@ARGV or a file read), and the module does not launder it; untaint it with a regex that accepts '
          . 'only what you expect, as in my ($path) = $input =~ m{\\A(/home/alice/data/[\\w.-]+)\\z} or die');
}

# $reads_only: the call only reads (holder, read_counter), which perl -T
# allows with a tainted path.
sub _path_arg {
    my ($step, $name, $v, $reads_only) = @_;
    _usage($step, "$name must be a non-empty path") unless defined $v && length $v && !ref $v;
    _usage($step, "$name must not contain a NUL byte") if $v =~ /\0/;
    _untainted($step, $name, $v) unless $reads_only;
    return $v;
}

sub _check_opts {
    my ($step, $opts, @known) = @_;
    return unless %$opts;
    my %k = map { $_ => 1 } @known, 'command';
    for (sort keys %$opts) {
        _usage($step, "unknown option '$_' (known: " . join(', ', sort keys %k) . ')') unless $k{$_};
    }
}

# A lease in microseconds: more than 0, at most the protocol's 24 hours,
# which every process judges a longer one implausible beyond.
sub _lease_us {
    my ($step, $lease) = @_;
    return $DEFAULT_LEASE * 1_000_000 unless defined $lease;
    # It goes into the token's name, which rename would refuse under perl -T.
    _untainted($step, 'lease', $lease);
    my $us = int(_seconds($step, 'lease', $lease, 0) * 1_000_000);
    _usage($step, 'lease must be at least a microsecond') if $us <= 0;
    _usage($step, 'lease must not exceed 24 hours (the protocol\'s maximum lease): every process judges a '
          . 'longer one implausible and takes the lock over')
      if $us > $MAX_LEASE_US;
    return $us;
}

# How a lock is asked for: (shared, slots, no wait). shared => 1, slots =>
# N (a semaphore of N, 1 to 999999, shared by nature), or lock_type as
# File::NFSLock takes it: LOCK_SH, LOCK_EX, either with LOCK_NB (one try),
# as Fcntl's numbers or the words SH, SHARED, EX, EXCLUSIVE, NB,
# NONBLOCKING, BL, BLOCKING joined by '|'.
sub _lock_mode {
    my ($step, $opts) = @_;
    my ($shared, $nb);
    if (defined $opts->{lock_type}) {
        my $v = $opts->{lock_type};
        my %word = (SH => 1, SHARED => 1, EX => 2, EXCLUSIVE => 2, NB => 4, NONBLOCKING => 4, BL => 2, BLOCKING => 2);
        my $bits = 0;
        if ($v =~ /\A[0-9]+\z/) { $bits = $v }
        else {
            for my $w (split /\s*\|\s*/, uc $v) {
                _usage($step, "lock_type takes LOCK_SH or LOCK_EX (from Fcntl), with LOCK_NB, or the words SH, EX, NB "
                      . "joined by '|', not \"$v\"") unless $word{$w};
                $bits |= $word{$w};
            }
        }
        _usage($step, "lock_type $v asks for neither or both of LOCK_SH and LOCK_EX: name one")
          if ($bits & 3) == 0 && $v =~ /\A[0-9]+\z/ || ($bits & 3) == 3 || $bits & ~7;
        ($shared, $nb) = (($bits & 1) ? 1 : 0, ($bits & 4) ? 1 : 0);
    }
    if (defined $opts->{shared}) {
        _usage($step, 'shared and lock_type disagree: name the mode once') if defined $shared && !$shared != !$opts->{shared};
        $shared = $opts->{shared} ? 1 : 0;
    }
    my $slots = 0;
    if (defined $opts->{slots}) {
        $slots = $opts->{slots};
        # It goes into the lock's names, as a lease does: not laundered.
        _untainted($step, 'slots', $slots);
        _usage($step, "slots must be a whole number from 1 to 999999 (the holders a semaphore admits at once), not \"$slots\"")
          unless $slots =~ /\A[1-9][0-9]{0,5}\z/;
        _usage($step, 'slots makes a shared lock (a semaphore); it cannot be asked for exclusively')
          if defined $shared && !$shared;
        $shared = 1;
    }
    return ($shared ? 1 : 0, $slots + 0, $nb);
}

# The mode of lock directories and workspaces this process creates:
# TOKENLOCK_DIR_MODE, as the command reads it, else 0755. Group write
# (0775, 0770) without a named group chooses the group of a lock directory
# this user owns for sharing (docs/security.md, Who is trusted).
sub _dir_mode {
    my ($step) = @_;
    my $text = $ENV{TOKENLOCK_DIR_MODE};
    return $DIR_MODE unless defined $text && length $text;
    _usage($step, "TOKENLOCK_DIR_MODE takes an octal mode such as 0775, not \"$text\"")
      unless $text =~ /\A([0-7]+)\z/ && oct($1) <= 07777;
    my $mode = oct $1;
    my $problem = ($mode & 0700) != 0700 ? 'the owner needs read, write and search permission (0700) on a lock directory'
      : $mode & 0002 ? 'a lock directory writable by others is refused by every process that uses it '
      . '(docs/security.md): share it with a group instead, with 0775 or 0770 and a common group'
      : $mode & 01000 ? 'in a sticky lock directory only a token\'s owner may rename it, so users lock each other out'
      : undef;
    _usage($step, "TOKENLOCK_DIR_MODE $text: $problem") if defined $problem;
    return $mode;
}

# Group names resolved by this process: the group database is read once.
my %GID_OF;

# The group named for sharing: the option `group`, else TOKENLOCK_GROUP; a
# group name or a decimal gid, of which this user must be a member. Returns
# its gid, or undef when none is named.
sub _named_group {
    my ($step, $opt) = @_;
    my $g = defined $opt ? $opt : $ENV{TOKENLOCK_GROUP};
    return undef unless defined $g && length $g;
    my $from = defined $opt ? 'the group option' : 'TOKENLOCK_GROUP';
    _usage($step, "$from must be a group name or a decimal gid, not a reference") if ref $g;
    my $gid = $GID_OF{$g};
    if (!defined $gid) {
        if ($g =~ /\A([0-9]{1,10})\z/) { $gid = $1 + 0 }
        else {
            my @gr = getgrnam($g);
            _usage($step, "$from names the group \"$g\", which this host does not know: name an existing group "
                  . '(getent group lists them) or give its gid')
              unless @gr;
            $gid = $gr[2];
        }
        # Untainted: a gid is only ever compared and passed to chown.
        ($gid) = "$gid" =~ /\A([0-9]+)\z/;
        %GID_OF = () if keys %GID_OF >= 100;
        $GID_OF{$g} = $gid;
    }
    _usage($step, "$from names group $g (gid $gid), and this process (uid $>) is not a member of it: a group is shared "
          . 'only by its members; add the user to the group (usermod -a -G), or name a group it is in (id -G lists them)')
      unless grep { $_ == $gid } split ' ', $);
    return $gid;
}

# ---------------------------------------------------------------------------
# Options as the command takes them

# A relative path starting with '-' would be read as an option.
sub _arg_path {
    my ($p) = @_;
    return $p =~ /^-/ ? "./$p" : $p;
}

# --legacy-timeout SECS when asked for: a command from before legacy tokens
# refuses it, which is right, since it would not honour it.
sub _legacy_timeout {
    my ($step, $opts) = @_;
    return () unless defined $opts->{legacy_timeout};
    return ('--legacy-timeout', _seconds($step, 'legacy_timeout', $opts->{legacy_timeout}, 0));
}

# --group NAME when the option names one; TOKENLOCK_GROUP reaches the
# command through the environment. Checked here as the module checks it.
sub _group_args {
    my ($step, $opts) = @_;
    return () unless defined $opts->{group};
    _named_group($step, $opts->{group});
    return ('--group', $opts->{group});
}

1;
