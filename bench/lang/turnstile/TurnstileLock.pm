package TurnstileLock;
# The bare rename protocol of docs/protocol.md with the ways of waiting
# that docs/waiting-turnstile.md compares, in core Perl: the twin of
# turnstile_lock.php (see there for the schemes; all but bell, which was
# tried in PHP only). A prototype for measuring: it does not judge or take
# over a holder, nor create the lock directory; its tokens name another
# host, so that the library judges them by their one-hour lease only.
use strict;
use warnings;
use Fcntl qw(:flock O_RDWR O_CREAT O_EXCL O_NOFOLLOW O_NONBLOCK O_NOCTTY S_ISREG);
use Time::HiRes qw(usleep clock_gettime CLOCK_MONOTONIC);

use constant { FREE => 'lockfile', TURNSTILE => 'turnstile', DEPUTY => 'turnstile.next',
    BACKOFF_MIN_US => 100, BACKOFF_MAX_US => 50_000, LOOK_EVERY_NS => 10_000_000, AGED_US => 2000 };

my %BASE = (
    poll      => { line => 'none' },
    block     => { line => 'block' },
    nb        => { line => 'nb' },
    fair      => { line => 'nb', hungry_us => 1000 },
    fairblock => { line => 'block', hungry_us => 1000 },
    deputy    => { line => 'nb', hungry_us => 1000, deputy_us => 200 },
    aged      => { line => 'nb', nb_us => 16_000, hungry_us => 1000, age_ms => 25 },
    agedbarge => { line => 'nb', nb_us => 16_000, hungry_us => 1000, age_ms => 25, newcomers_yield => 0 },
    ageddeputy => { line => 'nb', nb_us => 16_000, hungry_us => 1000, deputy_us => 500, age_ms => 25 },
);

# The scheme NAME, with an optional tail "@H/N/G/D" as in the PHP twin:
# head poll, sleepers' retry, hungry after, deputy's retry (microseconds).
sub scheme {
    my ($name) = @_;
    my ($base, $tune) = split /@/, $name, 2;
    my $b = $BASE{$base} or die "unknown scheme $name\n";
    my %s = (head_us => 1000, nb_us => 2000, own_ms => 100, hungry_us => 0,
        hungry_poll_us => 100, deputy_us => 0, age_ms => 0, newcomers_yield => 1, %$b);
    if (defined $tune) {
        my @t = split m{/}, $tune;
        @s{qw(head_us nb_us hungry_us deputy_us)[0 .. $#t]} = @t;
    }
    return \%s;
}

sub now_ns { return int(clock_gettime(CLOCK_MONOTONIC) * 1e9) }

sub new {
    my ($class, $dir, $scheme) = @_;
    return bless { dir => $dir, s => scheme($scheme), token => '', last_look => 0,
        turn => undef, next => undef, fallback => '' }, $class;
}

# Acquires within WAIT seconds (undef: no limit); false when the budget ran out.
sub acquire {
    my ($self, $wait) = @_;
    $self->{since} = now_ns();
    my $deadline = defined $wait ? $self->{since} + int($wait * 1e9) : 9**18;
    my $s = $self->{s};
    # A hungry head is owed the next release: a newcomer lines up behind
    # it rather than renaming the freed token first.
    my $owed = $s->{hungry_us} && $s->{newcomers_yield} && $self->line_is_hungry;
    return 1 if !$owed && $self->try_rename(1);
    return $self->poll($deadline) if $s->{line} eq 'none' || !$self->open_turnstile;
    return $self->line($deadline);
}

sub release {
    my ($self) = @_;
    rename("$self->{dir}/$self->{token}", "$self->{dir}/" . FREE)
        or die "release $self->{dir}: cannot rename $self->{token} back: $!\n";
}

# One rename of the free token; after a first failure a lookup first, as
# a failed rename locks the directory and stalls the holder's own rename.
sub try_rename {
    my ($self, $first) = @_;
    return 0 if !$first && !lstat("$self->{dir}/" . FREE);
    $self->{token} = sprintf 'lockfile.%d.proto-00000000.%d.0.%08x%08x',
        int(Time::HiRes::time() * 1e6) + 3_600_000_000, $$, int rand 2**32, int rand 2**32;
    return rename("$self->{dir}/" . FREE, "$self->{dir}/$self->{token}");
}

# The listing a waiter makes every 10 ms to judge the holder (its cost).
sub look_now {
    my ($self) = @_;
    my $now = now_ns();
    return if $now - $self->{last_look} < LOOK_EVERY_NS;
    $self->{last_look} = $now;
    opendir(my $dh, $self->{dir}) or return;
    my @names = readdir $dh;
}

# The modules' waiting before the turnstile: jittered backoff, 100 us to 50 ms.
sub poll {
    my ($self, $deadline) = @_;
    my $delay = BACKOFF_MIN_US;
    while (1) {
        my $left = int(($deadline - now_ns()) / 1000);
        return $self->try_rename(0) if $left <= 0;
        my $sleep = int($delay * (0.75 + 0.5 * rand));
        usleep($sleep < $left ? $sleep : $left);
        return 1 if $self->try_rename(0);
        $self->look_now;
        $delay = 2 * $delay < BACKOFF_MAX_US ? 2 * $delay : BACKOFF_MAX_US;
    }
}

# Opens the turnstile, and the deputy's place when the scheme has one.
sub open_turnstile {
    my ($self) = @_;
    $self->{turn} = $self->open_place(TURNSTILE, $self->{turn});
    return 0 unless $self->{turn};
    return 1 unless $self->{s}{deputy_us};
    $self->{next} = $self->open_place(DEPUTY, $self->{next});
    return $self->{next} ? 1 : 0;
}

# Opens (or, having seen the lock held, creates) D/NAME without following
# a link and without blocking on a FIFO; anything but a regular file of one
# link, ours or the lock directory owner's, not writable by others, is left
# alone (undef: the wait polls instead).
sub open_place {
    my ($self, $name, $kept) = @_;
    return $kept if $kept && (stat $kept)[3] == 1;
    my $path = "$self->{dir}/$name";
    my $fh;
    my $made = sysopen($fh, $path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY, 0600);
    if (!$made && !sysopen($fh, $path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)) {
        $self->{fallback} = "$name: cannot open: $!";
        return undef;
    }
    my @st = stat $fh;
    my $owner = (lstat $self->{dir})[4] // -1;
    my $why = !S_ISREG($st[2]) ? 'not a regular file'
        : $st[3] != 1 ? 'more than one link'
        : $st[4] != $> && $st[4] != $owner ? 'owned by another user'
        : $st[2] & 0002 ? 'writable by others' : '';
    if ($why ne '') {
        close $fh;
        $self->{fallback} = "$name: $why";
        return undef;
    }
    chmod 0600, $fh if $made;  # exactly, whatever the umask; a group-shared lock gives 0660
    $self->{fallback} = '';
    return $fh;
}

# Whether a head has marked the turnstile hungry (one lstat).
sub line_is_hungry {
    my ($self) = @_;
    my @st = lstat("$self->{dir}/" . TURNSTILE);
    return @st && $st[7] > 0;
}

# Waits in the turnstile, and as its head, until the lock is ours or the budget ends.
sub line {
    my ($self, $deadline) = @_;
    while (1) {
        return $self->head($deadline) if $self->enter_turnstile($deadline);
        # A sleeper's own look: the bound on what a stuck head costs.
        return 1 if $self->try_rename(0);
        return 0 if now_ns() >= $deadline;
    }
}

# Becomes the head (true), or false when the sleeper's own look or its deadline is due.
sub enter_turnstile {
    my ($self, $deadline) = @_;
    my $s = $self->{s};
    return flock($self->{turn}, LOCK_EX) if $s->{line} eq 'block';
    my $until = now_ns() + $s->{own_ms} * 1_000_000;
    $until = $deadline if $deadline < $until;
    while (1) {
        return 1 if flock($self->{turn}, LOCK_EX | LOCK_NB);
        return $self->deputy($until) if $self->{next} && flock($self->{next}, LOCK_EX | LOCK_NB);
        my $left = int(($until - now_ns()) / 1000);
        return 0 if $left <= 0;
        my $pause = $self->sleeper_pause;
        usleep($pause < $left ? $pause : $left);
    }
}

# How long a sleeper sleeps between tries: with aging, half as long for
# every age_ms waited, down to AGED_US, so that the sleeper that waited
# longest most likely takes a place that frees (see the PHP twin).
sub sleeper_pause {
    my ($self) = @_;
    my $s = $self->{s};
    return $s->{nb_us} unless $s->{age_ms};
    my $halvings = int((now_ns() - $self->{since}) / 1e6 / $s->{age_ms});
    $halvings = 30 if $halvings > 30;
    my $pause = $s->{nb_us} >> $halvings;
    return $pause > AGED_US ? $pause : AGED_US;
}

# Second in line: tries the head's place every deputy_us, so that a new
# head waits within that time of the last one taking the lock; the
# sleepers behind have a whole turn of the lock to take its place.
sub deputy {
    my ($self, $until) = @_;
    while (1) {
        my $got = flock($self->{turn}, LOCK_EX | LOCK_NB);
        my $left = int(($until - now_ns()) / 1000);
        if ($got || $left <= 0) {
            flock($self->{next}, LOCK_UN);
            return $got;
        }
        usleep($self->{s}{deputy_us} < $left ? $self->{s}{deputy_us} : $left);
    }
}

# The head polls the lock at a short interval (it alone looks at the lock)
# and leaves the turnstile once it holds the lock or gives up, so that the
# next head is waiting before the next release.
sub head {
    my ($self, $deadline) = @_;
    my $s = $self->{s};
    my $since = now_ns();
    # A mark left by a head that died is this head's to clear.
    my ($hungry, $got) = ((stat $self->{turn})[7] > 0 ? 1 : 0, 0);
    while (1) {
        $got = $self->try_rename(0);
        my $now = now_ns();
        last if $got || $now >= $deadline;
        $self->look_now;
        $hungry = truncate($self->{turn}, 1)
            if $s->{hungry_us} && !$hungry && $now - $since >= $s->{hungry_us} * 1000;
        my $pause = $hungry ? $s->{hungry_poll_us} : $s->{head_us};
        my $left = int(($deadline - $now) / 1000) || 1;
        usleep($pause < $left ? $pause : $left);
    }
    truncate($self->{turn}, 0) if $hungry;
    flock($self->{turn}, LOCK_UN);
    return $got;
}

1;
