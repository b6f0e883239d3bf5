package Tokenlock::Token;

# Token names (docs/protocol.md, Tokens): the protocol's constants, making a
# token of ours, parsing any name found in a lock directory, and judging
# whether a held token is stale. Owner marks are token names too.

use strict;
use warnings;

use Tokenlock::System qw(_identity _nonce _now_us _proc_stat);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_classify _judge _make_token _mark_of _owner_part _token_of_mark _utc);

our $FREE = 'lockfile';

# The protocol's bound on leases (protocol_max_lease): every process must
# agree on which leases are implausible.
our $MAX_LEASE_US           = 24 * 3600 * 1_000_000;
our $SKEW_US                = 1_000_000;
our $DEFAULT_LEASE          = 3600;
our $DEFAULT_LEGACY_TIMEOUT = 60;

sub _make_token {
    my ($expiry_us, $id) = @_;
    return "$FREE." . int($expiry_us) . ".$id->{owner}." . _nonce($id);
}

# What a name in the lock directory is (token_name.cpp): 'free', 'held',
# 'legacy', 'malformed' (starts with "lockfile." but breaks the grammar,
# never taken over) or 'other'; with the parsed fields for held and legacy.
# $plain: the name is a share entry's, never read as a shared name.
sub _classify {
    my ($name, $plain) = @_;
    return ('free') if $name eq $FREE;
    if ($name =~ /\Alockfile([0-9].*)\z/s) {
        my $s = $1;
        return ('other') unless $s =~ /\A[1-9][0-9]{0,11}\z/;
        return ('legacy', { expiry_us => $s * 1_000_000, legacy => 1, name => $name });
    }
    return ('other') unless substr($name, 0, 9) eq 'lockfile.';
    my @f = split /\./, substr($name, 9), -1;
    return ('malformed') unless @f == 5;
    my ($expiry, $tag, $pid, $start, $nonce) = @f;
    return ('malformed')
      unless $expiry =~ /\A(?:0|[1-9][0-9]{0,18})\z/ && (length $expiry < 19 || $expiry le '9223372036854775807')
      && length($tag) >= 10 && length($tag) <= 41 && $tag =~ /\A[A-Za-z0-9_-]+-[0-9a-f]{8}\z/
      && $pid =~ /\A[1-9][0-9]{0,9}\z/ && $pid <= 2147483647
      && $start =~ /\A(?:0|[1-9][0-9]{0,19})\z/ && (length $start < 20 || $start le '18446744073709551615')
      && $nonce =~ /\A[0-9a-f]{16}\z/;
    my %t = (expiry_us => $expiry + 0, host_tag => $tag, pid => $pid + 0, start => $start, name => $name, nonce => $nonce);
    # A start of 20 digits from 10^19 up is no process's: a shared name
    # (docs/protocol.md, Shared locks and semaphores: Grammar). Judged with its real host tag and
    # start time; a reserved kind (3 to 8) by its lease alone, as the tag on
    # disk, foreign to every host, makes it.
    if (!$plain && $start =~ /\A1([0-9])([0-9]{6})([0-9]{12})\z/) {
        my ($kind, $limit, $start12) = ($1 + 0, $2 + 0, $3);
        $t{shared} = { kind => $kind, limit => $limit, tag => $tag };
        if ($kind <= 2) {
            $t{host_tag} = substr($tag, 0, -8) . sprintf('%08x', hex(substr($tag, -8)) ^ 0xffffffff);
            ($t{start} = $start12) =~ s/\A0+(?=.)//;
        }
    }
    return ('held', \%t);
}

sub _utc {
    my ($us) = @_;
    my $s = int($us / 1_000_000);
    $s-- if $us < 0 && $s * 1_000_000 != $us;
    my @t = gmtime($s);
    return sprintf('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', $t[5] + 1900, $t[4] + 1, @t[3, 2, 1, 0], $us - $s * 1_000_000);
}

sub _secs_text {
    my ($us) = @_;
    return sprintf('%.3f s', $us / 1_000_000);
}

# Whether a held token is stale (lock_directory.cpp, judge): its lease
# ended, its lease is implausibly long, or its owner on this host is
# provably gone. Returns (stale, reason, owner), owner being 'alive' or
# 'dead' when this host could tell, else undef.
sub _judge {
    my ($t, $legacy_timeout_us) = @_;
    my $now = _now_us();
    if ($t->{legacy}) {
        my $ends = $t->{expiry_us} + $legacy_timeout_us;
        my $who = "a script using the legacy rename lock ($t->{name}, taken " . _utc($t->{expiry_us}) . ')';
        return (1, "legacy token of $who is dated implausibly far in the future: treated as stale")
          if $ends - $now > $MAX_LEASE_US + $SKEW_US;
        return (1, "legacy token of $who is older than the legacy timeout of " . _secs_text($legacy_timeout_us)
              . ' (by ' . _secs_text($now - $ends) . ')')
          if $now > $ends + $SKEW_US;
        return (0, "held by $who until " . _utc($ends) . ' (the legacy timeout of ' . _secs_text($legacy_timeout_us) . ')');
    }
    my $same = $t->{host_tag} eq _identity()->{host_tag};
    my $who = "pid $t->{pid}" . ($same ? ' on this host' : " on host $t->{host_tag}");
    return (1, "lease of $who ends implausibly far in the future (" . _utc($t->{expiry_us})
          . ', more than the maximum lease of ' . _secs_text($MAX_LEASE_US) . ' from now): treated as stale')
      if $t->{expiry_us} - $now > $MAX_LEASE_US + $SKEW_US;
    return (1, "lease of $who ended " . _secs_text($now - $t->{expiry_us}) . ' ago (' . _utc($t->{expiry_us}) . ')')
      if $now > $t->{expiry_us} + $SKEW_US;
    my $until = "held by $who until " . _utc($t->{expiry_us});
    return (0, $until) unless $same;
    # kill answering EPERM (another user's process) means alive, and so
    # does an unreadable /proc entry (hidepid): the lease settles it.
    if (!kill(0, $t->{pid}) && $!{ESRCH}) {
        return (1, "owner $who has exited", 'dead');
    }
    my ($state, $start) = _proc_stat($t->{pid});
    return (0, $until, 'alive') unless defined $state;
    return (1, "owner $who has exited (zombie)", 'dead') if $state eq 'Z' || $state eq 'X';
    return (1, "owner $who is gone; the pid now belongs to another process (start time $start, token says $t->{start})", 'dead')
      if $t->{start} ne '0' && $start ne $t->{start};
    return (0, $until, 'alive');
}

sub _mark_of { my ($token) = @_; return 'h.' . substr($token, 9) }

# The held token a mark names, or undef when it is no mark.
sub _token_of_mark {
    my ($n) = @_;
    return undef unless substr($n, 0, 2) eq 'h.';
    my $t = 'lockfile.' . substr($n, 2);
    my ($kind, $info) = _classify($t);
    return $kind eq 'held' ? $info : undef;
}

sub _owner_part { my ($token) = @_; (my $o = $token) =~ s/\Alockfile\.[0-9]+\.//; return $o }

1;
