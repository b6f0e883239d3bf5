package Tokenlock::Redis;

# A lock that is a name in a Redis server (docs/redis.md), for hosts that
# share no filesystem. Core Perl has no Redis client, so each call runs
# the tokenlock command with --redis: the same keys, scripts and fences as
# the C++ library, and the same errors.

use strict;
use warnings;
# Tokenlock.pm's stubs of acquire, try_acquire, with_lock, holder and holders, which
# load this file at their first call, are replaced.
no warnings 'redefine';

use Tokenlock::Error qw(_error _usage);
use Tokenlock::System qw(_load_part);
use Tokenlock::Args qw(_check_opts _lease_us _lock_mode _seconds);
use Tokenlock::Lock qw(_owned _run_held);

sub _wait_args {
    my ($step, $opts) = @_;
    my $wait = defined $opts->{wait} ? $opts->{wait} : 10;
    return () if $wait eq 'forever';
    _seconds($step, 'wait', $wait, 1);
    return $wait == 0 ? ('-n') : ('-w', $wait);
}

sub _lease_args {
    my ($step, $opts) = @_;
    return () unless defined $opts->{lease};
    _lease_us($step, $opts->{lease});
    return ('--lease', $opts->{lease});
}

sub _url_arg {
    my ($step, $url, $name) = @_;
    _usage($step, 'the Redis URL must be a non-empty string such as redis://127.0.0.1:6379')
      unless defined $url && length $url && !ref $url;
    _usage($step, 'the lock name must be a non-empty string') unless defined $name && length $name && !ref $name;
    _usage($step, 'the lock name must not start with "-"') if $name =~ /\A-/;
}

# The URL with its password masked, whatever is malformed: everything
# before the last '@' of the part after the scheme is user information, a
# ':' in an authority without '@' that no port follows may start a
# password typed without its '@', and password parameters are masked too.
sub _masked {
    my ($url) = @_;
    return $url unless defined $url && !ref $url;
    my ($scheme, $rest) = $url =~ m{\A([A-Za-z][A-Za-z0-9+.-]*:(?://?)?)?(.*)\z}s;
    $scheme = '' unless defined $scheme;
    my $at = rindex($rest, '@');
    if ($at >= 0) {
        my $colon = index($rest, ':');
        $rest = ($colon >= 0 && $colon < $at ? substr($rest, 0, $colon) . ':***' : '***') . substr($rest, $at);
    }
    else {
        $rest =~ s{\A((?:\[[^\]]*\])?[^/?#:\[]*):(?![0-9]*(?:[/?#]|\z))[^/?#]*}{$1:***};
    }
    $rest =~ s{([?&;](?:pass|password|auth|requirepass)=)[^&;#]*}{$1***}gi;
    return $scheme . $rest;
}

# The password alone (as the URL gives it, encoded or not), to take out of
# what the command says; undef when there is none worth searching for.
sub _password {
    my ($url) = @_;
    my ($rest) = $url =~ m{\A(?:[A-Za-z][A-Za-z0-9+.-]*:(?://?)?)?(.*)\z}s;
    my $at = rindex($rest, '@');
    return undef if $at < 0;
    my $user = substr($rest, 0, $at);
    my $pw = index($user, ':') >= 0 ? substr($user, index($user, ':') + 1) : $user;
    return length $pw >= 3 ? $pw : undef;
}

# The command and its errors: the URL reaches the child in its environment
# only (--redis env:TOKENLOCK_URL), never on its argv, which every local
# user can read; whatever the command says is masked once more.
sub _call_redis {
    my ($url, $ctx, @args) = @_;
    $ctx->{env} = { TOKENLOCK_URL => $url };
    _load_part('Command');
    my $out = eval { Tokenlock::Command::_call($ctx, @args) };
    return $out if defined $out;
    my $err = $@;
    if (ref $err) {
        my $pw = _password($url);
        for my $k (qw(message output)) {
            next unless defined $err->{$k};
            $err->{$k} =~ s/\Q$url\E/_masked($url)/ge;
            $err->{$k} =~ s/\Q$pw\E/***/g if defined $pw;
        }
    }
    die $err;
}

# The URL of each lock, outside the object's hash, so that a dump of the
# object (Data::Dumper, a logged structure) cannot show its password.
my %URL;

sub _id { require Scalar::Util; return Scalar::Util::refaddr($_[0]) }

# An owner id as the command prints it: host tag, pid, start time, nonce.
my $OWNER = qr/[A-Za-z0-9_-]+-[0-9a-f]{8}\.[0-9]+\.[0-9]+\.[0-9a-f]{16}/;

# The mode as the command takes it. Checked here, as the directory lock
# checks it (slots from 1 to 999999, shared and lock_type agreeing), so that
# a bad one is the module's usage error before any process starts.
sub _mode_args {
    my ($shared, $slots) = @_;
    return $slots ? ('--slots', $slots) : $shared ? ('-s') : ();
}

sub acquire {
    my ($class, $url, $name, %opts) = @_;
    _check_opts('acquire', \%opts, qw(wait lease shared slots lock_type));
    _url_arg('acquire', $url, $name);
    my $what = _masked($url) . " $name";
    my ($shared, $slots, $nb) = _lock_mode("acquire $what", \%opts);
    $opts{wait} = 0 if $nb && !defined $opts{wait};
    my $wait = defined $opts{wait} ? $opts{wait} : 10;
    my @args = ('acquire', '--redis', 'env:TOKENLOCK_URL', _mode_args($shared, $slots), _wait_args('acquire', \%opts),
        _lease_args('acquire', \%opts), $name);
    my $out = _call_redis($url, { step => 'acquire', path => $what, opts => \%opts,
        busy => $wait eq 'forever' || $wait > 0 ? 'timed_out' : 'busy' }, @args);
    # A shared grant has no fence: the command prints its owner id alone.
    my ($token) = $out =~ ($shared ? qr/\A((?:[0-9]+\.)?$OWNER)\n?\z/ : qr/\A([0-9]+\.$OWNER)\n?\z/)
      or die _error(code => 'command_failed',
        message => "Tokenlock: acquire $what: the tokenlock command printed no token: \"$out\"");
    my $self = bless { name => $name, what => $what, token => $token, pid => $$, held => 1, shared => $shared,
        slots => $slots, command => $opts{command} }, ref($class) || $class;
    $URL{ _id($self) } = $url;
    return $self;
}

sub try_acquire {
    my ($class, $url, $name, %opts) = @_;
    $opts{wait} = 0 unless defined $opts{wait};
    my $lock = eval { $class->acquire($url, $name, %opts) };
    return $lock if $lock;
    my $err = $@;
    return undef if ref $err && ($err->code eq 'busy' || $err->code eq 'timed_out');
    die $err;
}

sub token { $_[0]{token} }

sub name  { $_[0]{name} }

# Masked: the URL given, with its password as ***.
sub url   { _masked($URL{ _id($_[0]) }) }

sub held  { $_[0]{held} && $_[0]{pid} == $$ ? 1 : 0 }

# 'exclusive' or 'shared' (a reader, or a semaphore's holder), and the
# semaphore's size (0: none), as for a lock directory.
sub mode  { $_[0]{shared} ? 'shared' : 'exclusive' }

sub slots { $_[0]{slots} || 0 }

# The fencing token: grows with every grant of this name. A shared grant
# has none; an undef would compare as 0 in the caller's fenced write, so
# asking is an error.
sub fence {
    my ($self) = @_;
    _usage("fence $self->{what}", 'a shared hold gives no fence; take the lock exclusively to write')
      if $self->{shared};
    my ($f) = $self->{token} =~ /\A([0-9]+)\./;
    return $f;
}

sub _command {
    my ($self, $step, @args) = @_;
    my $ctx = { step => $step, path => $self->{what},
        opts => defined $self->{command} ? { command => $self->{command} } : {} };
    # The token as the command printed it: fence.owner, or a shared
    # grant's owner alone.
    my $token = $self->{token};
    my $out = eval {
        _call_redis($URL{ _id($self) }, $ctx, $step, '--redis', 'env:TOKENLOCK_URL', @args, $self->{name}, $token);
    };
    return $out if defined $out;
    my $err = $@;
    $self->{held} = 0 if ref $err && $err->code eq 'lock_lost';
    die $err;
}

sub refresh {
    my ($self, %opts) = @_;
    _check_opts('refresh', \%opts, qw(lease));
    _owned($self, 'refresh');
    $self->_command('refresh', _lease_args('refresh', \%opts));
    return $self->{token};
}

sub release {
    my ($self) = @_;
    _owned($self, 'release');
    $self->_command('release');
    $self->{held} = 0;
    return 1;
}

sub DESTROY {
    my ($self) = @_;
    if ($self->{held} && $self->{pid} == $$) {
        local ($@, $!, $?);
        eval { $self->release; 1 }
          or warn "Tokenlock: the Redis lock $self->{name} was still held when its object went away, "
          . "and releasing it failed: $@";
    }
    delete $URL{ _id($self) };
}

sub CLONE_SKIP { 1 }

sub with_lock {
    my ($url, $name, $code, %opts) = @_;
    _usage('with_lock', 'the third argument must be a code reference') unless ref $code eq 'CODE';
    my $lock = Tokenlock::Redis->acquire($url, $name, %opts);
    return _run_held($lock, $code, wantarray, _masked($url) . " $name");
}

# The command's status --json of NAME, decoded.
sub _status {
    my ($step, $url, $name, $opts) = @_;
    _check_opts($step, $opts, ());
    _url_arg($step, $url, $name);
    my $what = _masked($url) . " $name";
    my $out = _call_redis($url, { step => $step, path => $what, opts => $opts },
        'status', '--json', '--redis', 'env:TOKENLOCK_URL', $name);
    require JSON::PP;
    my $s = eval { JSON::PP::decode_json($out) };
    die _error(code => 'command_failed',
        message => "Tokenlock: $step $what: the tokenlock command printed what is not JSON: \"$out\"")
      unless ref $s eq 'HASH';
    return $s;
}

# One holder as the command's JSON gives it, with the directory lock's
# mode, slots and waiting_writer. A shared grant gives no fence: the
# group's fence that the command shows is left out, as $lock->fence has
# none to give.
sub _holder_of {
    my ($h) = @_;
    my $shared = ($h->{mode} || '') eq 'shared';
    return {
        (map { $_ => $h->{$_} } grep { exists $h->{$_} } qw(token owner pid host_tag remaining_ms)),
        ($shared || !exists $h->{fence} ? () : (fence => $h->{fence})),
        mode           => $shared ? 'shared' : 'exclusive',
        slots          => $h->{slots} || 0,
        waiting_writer => $h->{waiting_writer} ? 1 : 0,
    };
}

# Who holds NAME: undef when free, else { token, fence, owner, pid,
# host_tag, remaining_ms, mode, slots, waiting_writer }, from the
# command's status --json; of shared holders, the one it names first.
sub holder {
    my ($url, $name, %opts) = @_;
    my $s = _status('status', $url, $name, \%opts);
    return undef unless ($s->{state} || '') eq 'held';
    my @h = grep { !$_->{waiting_writer} } @{ $s->{holders} || [] };
    return _holder_of(@h ? $h[0] : $s);
}

# Every holder of NAME: one writer, or every shared holder and a writer
# waiting for them to leave; () when it is free.
sub holders {
    my ($url, $name, %opts) = @_;
    my $s = _status('holders', $url, $name, \%opts);
    return () unless ($s->{state} || '') eq 'held';
    # A command from before shared locks lists no holders[]: its one.
    return map { _holder_of($_) } @{ $s->{holders} || [$s] };
}

1;

__END__

=head1 NAME

Tokenlock::Redis - a lock that is a name in a Redis server

=head1 SYNOPSIS

    use Tokenlock;   # Tokenlock::Redis is compiled by its first call

    my $lock = Tokenlock::Redis->acquire('redis://127.0.0.1:6379', 'report', wait => 10, lease => 60);
    my $fence = $lock->fence;      # grows with every grant of this name
    $lock->refresh(lease => 60);   # lock_lost if another took it meanwhile
    $lock->release;

    Tokenlock::Redis::with_lock($url, 'report', sub { ... }, wait => 10);
    my $lock = Tokenlock::Redis->try_acquire($url, 'report');   # undef when held
    my $h = Tokenlock::Redis::holder($url, 'report');  # undef, or { token, fence, owner, pid, host_tag, remaining_ms,
                                                        #            mode, slots, waiting_writer }

    # Readers together, never beside a writer; a semaphore of 3.
    my $r = Tokenlock::Redis->acquire($url, 'page', shared => 1, wait => 5, lease => 30);
    Tokenlock::Redis::with_lock($url, 'convert', sub { convert() }, slots => 3, wait => 60, lease => 30);
    my @all = Tokenlock::Redis::holders($url, 'page');   # every holder, and a waiting writer

=head1 DESCRIPTION

For hosts that share no filesystem, a lock can be a name in a Redis server
(docs/redis.md). Core Perl has no Redis client, so these calls run the
command with C<--redis> (one process start each); they share the lock with
the command and the C++ library, with the same fences.

URLs as the command takes them: C<redis://[[user]:password@]host[:port][/db]>
or C<unix:///path/to/socket>. A password (or user) holding any of
C<@ : / ? # [ ] %> or a space must be percent-encoded (C<%40> for C<@>,
C<%3A> for C<:>, C<%2F>, C<%3F>, C<%23>, C<%5B>, C<%5D>, C<%25>, C<%20>).
The URL never reaches the command's argv, which every local user can read
in the process list: the command gets C<--redis env:TOKENLOCK_URL> and the
URL in its environment only (a command from before C<env:> refuses it:
update the command). The object keeps the URL outside its hash, so a dump
of it (C<Data::Dumper>) does not show it; C<< $lock->url >> and every message
and C<< $err->command >> show the password as C<***>, whatever is malformed
in the URL. C<wait> is as for C<< Tokenlock->acquire >> (default 10
seconds; C<'forever'>; 0 for one try), C<lease> defaults to the command's
300 seconds. Redis cannot see that a holder died: a grant ends with its
lease, so keep leases short and refresh. The object releases a forgotten
lock when it goes away, never in a forked child, whose C<release> dies with
C<not_owner>. Errors are C<Tokenlock::Error> objects with the codes of
L<Tokenlock/ERRORS>: C<busy>, C<timed_out>, C<lock_lost>, C<bad_argument> (a bad URL,
name or option), C<system> with the errno of a connection that failed.

=head2 Shared holds and semaphores

C<acquire>, C<try_acquire> and C<with_lock> take the options of a lock
directory's, with the same names and meaning (L<Tokenlock/acquire>):
C<< shared => 1 >> for a reader, C<< slots => N >> for one of N slots (1
to 999999; implies C<shared>; every holder gives the same N), and
C<< lock_type => LOCK_SH | LOCK_EX >>, with C<LOCK_NB> for a single try,
or the words C<SH>, C<EX>, C<NB> joined by C<|>. They become the command's
C<-s> and C<--slots N>, and share the lock with the command's
(C<tokenlock run -s --redis ...>), the C++ library's and the other
modules' readers. A mode that is not one of these, a C<slots> of 0 or
over 999999, and a C<shared> or C<lock_type> that disagrees with the
rest are C<bad_argument> before any command runs.

    # Any number of readers at once, never beside a writer.
    my $r = Tokenlock::Redis->acquire($url, 'prices', shared => 1, wait => 5, lease => 30);
    my $prices = read_prices();
    $r->release;

    # A writer: the same call as ever. It waits for the readers to leave,
    # and readers that come after it wait for it (writer preference).
    Tokenlock::Redis::with_lock($url, 'prices', sub { write_prices($_[0]->fence) }, wait => 30);

    # A semaphore: at most 3 conversions at once, on any host.
    Tokenlock::Redis::with_lock($url, 'convert', sub { convert_one_file() }, slots => 3, wait => 60, lease => 60);

Each shared holder has its own lease, kept alive by its own C<refresh>;
Redis cannot see that a holder died, so a reader killed with C<kill -9>
holds its share until its lease ends, and then no more: keep leases short.
C<< $lock->mode >> is C<exclusive> or C<shared>, C<< $lock->slots >> the
semaphore's size (0 for none), C<< $lock->token >> a shared holder's
owner id, as the command prints it. A shared hold has no fence:
C<< $lock->fence >> dies with C<bad_argument> (C<a shared hold gives no
fence; take the lock exclusively to write>), since a fenced write would
take an undef for 0. C<refresh> and C<release> of a share whose lease
ended and which another took meanwhile die with C<lock_lost>, as for an
exclusive hold.

=head2 holder and holders

    my $h  = Tokenlock::Redis::holder($url, $name);    # undef when free
    my @hs = Tokenlock::Redis::holders($url, $name);   # () when free

From the command's C<status --json>. C<holders> lists every holder: one
writer, or every shared holder and a writer waiting for them to leave.
Each is a hash reference: C<token> (as C<acquire> printed it), C<owner>,
C<pid> and C<host_tag> (of the command process that asked for the grant:
the server frees a grant by its lease, whoever owned it),
C<remaining_ms> of its lease, C<mode> (C<exclusive> or C<shared>),
C<slots> (the semaphore's size, 0 for none), C<waiting_writer> (1 for a
writer's mark, which holds nothing but bars new readers), and C<fence>
for an exclusive holder only. C<holder> gives one of them: a holder
before a waiting writer.

=head1 SEE ALSO

L<Tokenlock>, L<Tokenlock::Error>, docs/redis.md, tokenlock(1).

=head1 LICENSE

Copyright (c) 2026 The tokenlock authors. Released under the MIT licence:
the file LICENSE at the top of the source tree.

=cut
