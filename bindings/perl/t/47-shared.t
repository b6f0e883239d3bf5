#!/usr/bin/perl
# Shared locks and semaphores (docs/protocol.md, Shared locks and semaphores): the names on disk,
# byte for byte; the API (shared, slots, lock_type, holders); the
# conversion of a lone share, joins, the last one out; share entries that
# are stale or planted, and tokens that are no directory; what an
# implementation that knows only docs/protocol.md sees.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use Fcntl qw(LOCK_SH LOCK_EX LOCK_NB);
use POSIX ();
use TokenlockTest;

use Tokenlock;

my $cmd = tokenlock_command();
my $dir = scratch_dir();
my $n   = 0;

sub fresh { return "$dir/l" . ++$n . '.lock' }

# The one lockfile* name in $d.
sub token_of {
    my ($d) = @_;
    my @t = grep { /\Alockfile/ } entries($d);
    die "token_of $d: (@t)" unless @t == 1;
    return $t[0];
}

sub shares_in { my ($d) = @_; return grep { /\As\./ } entries("$d/" . token_of($d)) }

# The module as it was before shared locks, from the source tree's git
# history: the parent of the commit that added Tokenlock/Shared.pm.
# Undef in a copy without the history.
sub old_module {
    my $repo = TokenlockTest::repo_dir();
    return undef unless -d "$repo/.git" || -f "$repo/.git";
    my ($st, $out) = capture(['git', '-C', $repo, 'log', '--diff-filter=A', '--format=%H', '--',
        'bindings/perl/lib/Tokenlock/Shared.pm']);
    my ($added) = $st == 0 ? (split ' ', $out)[-1] : ();
    return undef unless $added && $added =~ /\A([0-9a-f]{40})\z/;
    my $to = scratch_dir();
    ($st) = capture(['sh', '-c', 'git -C "$1" archive "$2^" bindings/perl/lib | tar -x -C "$3"', 'sh', $repo, $1, $to]);
    return $st == 0 && -f "$to/bindings/perl/lib/Tokenlock.pm" ? "$to/bindings/perl/lib" : undef;
}

sub code_of { my ($code) = @_; my $ok = eval { $code->(); 1 }; return $ok ? 'ok' : ref $@ ? $@->code : "died: $@" }

# This process's host tag and its inverse (the shared names' stag), and
# its start time, from a writer's token and /proc, not from the module.
my ($HOST_TAG, $STAG, $START);
{
    my $L = fresh();
    my $w = Tokenlock->acquire($L);
    ($HOST_TAG, $START) = $w->token =~ /\Alockfile\.[0-9]+\.([A-Za-z0-9_-]+-[0-9a-f]{8})\.$$\.([0-9]+)\.[0-9a-f]{16}\z/
      or BAIL_OUT('a writer token not of docs/protocol.md: ' . $w->token);
    $w->release;
    my ($host, $hash) = $HOST_TAG =~ /\A(.*)-([0-9a-f]{8})\z/;
    $STAG = sprintf('%s-%08x', $host, hex($hash) ^ 0xffffffff);
    my $stat = slurp("/proc/$$/stat");
    is((split ' ', ($stat =~ /\) (.*)\z/s)[0])[19], $START, 'the start time in tokens is field 22 of /proc/PID/stat');
}
my $START12 = sprintf('%012d', $START);

# --- the names on disk ---------------------------------------------------------
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1, lease => 30);
    my $lone = token_of($L);
    is($a->token, $lone, 'a lone share: its name is the token\'s');
    like($lone, qr/\Alockfile\.([0-9]+)\.\Q$STAG\E\.$$\.10000000\Q$START12\E\.[0-9a-f]{16}\z/,
        'lockfile.E.HOST-STAG.PID.1 0 000000 START12.NONCE (kind 0, no limit)');
    like($lone, token_re(), 'which is a held token of docs/protocol.md\'s grammar');
    is($a->mode, 'shared', 'mode shared');
    is_deeply([shares_in($L)], [], 'a lone share makes no entry');
    my ($e_lone, $nonce_lone) = $lone =~ /\Alockfile\.([0-9]+)\..*\.([0-9a-f]{16})\z/;

    my $b = Tokenlock->acquire($L, shared => 1, lease => 60);
    my $cover = token_of($L);
    like($cover, qr/\Alockfile\.([0-9]+)\.\Q$STAG\E\.$$\.11000000\Q$START12\E\.[0-9a-f]{16}\z/,
        'a second share converts it: a group cover (kind 1)');
    my @s = shares_in($L);
    is(scalar @s, 2, 'with two entries');
    my $copy_re = qr/\As\.$e_lone\.\Q$HOST_TAG\E\.$$\.$START\.\Q${\ substr($nonce_lone, 0, 8)}\E[0-9a-f]{8}\z/;
    my @copies = grep { $_ =~ $copy_re } @s;
    is(scalar @copies, 1, 'one copy of the lone holder\'s share: its expiry, the real host tag, its pid, start, '
          . 'and the first half of its nonce');
    isnt($copies[0], "s.$e_lone.$HOST_TAG.$$.$START.$nonce_lone", 'the last half is the converter\'s own');
    is($b->token, (grep { $_ !~ $copy_re } @s)[0], 'the joiner\'s token is its entry');
    like($b->token, qr/\As\.[0-9]+\.\Q$HOST_TAG\E\.$$\.$START\.[0-9a-f]{16}\z/, 'entry = s. expiry . host-hash8 . pid . start . nonce');
    my ($ce) = $cover =~ /\Alockfile\.([0-9]+)\./;
    my ($be) = $b->token =~ /\As\.([0-9]+)\./;
    ok($ce >= $be && $ce > $e_lone, 'the cover rule: the cover\'s expiry is at least every entry\'s');
    is(join(',', map { "$_->{mode}/$_->{slots}/$_->{owner}" } Tokenlock::holders($L)), 'shared/0/alive,shared/0/alive',
        'holders lists both shares');
    ok(!-e "$L/turnstile", 'a reader that could join did not line up: no turnstile was made');

    # The lone holder's refresh finds its name gone: it is a member now.
    my $old = $a->token;
    my $t = $a->refresh(lease => 90);
    like($t, qr/\As\.[0-9]+\.\Q$HOST_TAG\E\.$$\./, 'the converted holder refreshes as a member: a new entry');
    ok(!(grep { $_ =~ $copy_re } shares_in($L)), 'the copy of its lone share is gone');
    my ($te) = $t =~ /\As\.([0-9]+)\./;
    my ($ce2) = token_of($L) =~ /\Alockfile\.([0-9]+)\./;
    ok($ce2 >= $te, 'and the cover was renamed to cover the new lease');

    $a->release;
    is(scalar(shares_in($L)), 1, 'a member that leaves removes its entry; the cover stays');
    $b->release;
    is(token_of($L), 'lockfile', 'the last one out frees the token');
    is_deeply([shares_in($L)], [], 'with no entry left in it');
    ok(!$a->held && !$b->held, 'neither object holds any more');
    is(code_of(sub { $a->release }), 'not_owner', 'a second release: not_owner');
}

{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, slots => 3);
    like(token_of($L), qr/\Alockfile\.[0-9]+\.\Q$STAG\E\.$$\.10000003\Q$START12\E\.[0-9a-f]{16}\z/,
        'a semaphore of 3: the limit in six digits (000003)');
    my $lone = $a->token;
    my $r = $a->refresh(lease => 100);
    my ($e0) = $lone =~ /\Alockfile\.([0-9]+)\./;
    my ($e1, $rest) = $r =~ /\Alockfile\.([0-9]+)\.(.*)\z/;
    is($rest, ($lone =~ /\Alockfile\.[0-9]+\.(.*)\z/)[0], 'a lone share\'s refresh changes only the expiry');
    ok($e1 > $e0, 'which rises');
    is(token_of($L), $r, 'in one rename');
    is($a->slots, 3, 'slots 3');
    is(join(',', map { $_->{mode} . '/' . $_->{slots} } Tokenlock::holders($L)), 'shared/3', 'holders: shared, slot/3');
    $a->release;
    is(token_of($L), 'lockfile', 'a lone share\'s release: one rename back to lockfile');
}

# --- the API --------------------------------------------------------------------
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, lock_type => LOCK_SH);
    is($a->mode, 'shared', 'lock_type => LOCK_SH: shared, as File::NFSLock users pass it');
    my $b = Tokenlock->acquire($L, lock_type => 'SH|NB');
    is($b->mode, 'shared', "lock_type => 'SH|NB'");
    is(code_of(sub { Tokenlock->acquire($L, lock_type => LOCK_EX | LOCK_NB) }), 'busy', 'LOCK_EX|LOCK_NB tries once: busy');
    is(Tokenlock->try_acquire($L, lock_type => LOCK_EX), undef, 'try_acquire with LOCK_EX: undef');
    is(scalar(shares_in($L)), 2, 'the shares are untouched by the writers that gave up');
    like(token_of($L), qr/\.11000000[0-9]{12}\./, 'and the cover is no writer\'s mark');
    is(code_of(sub { Tokenlock->acquire($L, lock_type => LOCK_SH | LOCK_EX) }), 'bad_argument', 'LOCK_SH|LOCK_EX: bad_argument');
    is(code_of(sub { Tokenlock->acquire($L, lock_type => 'READ') }), 'bad_argument', 'an unknown word: bad_argument');
    is(code_of(sub { Tokenlock->acquire($L, slots => 0) }), 'bad_argument', 'slots 0: bad_argument');
    is(code_of(sub { Tokenlock->acquire($L, slots => 1_000_000) }), 'bad_argument', 'slots 1000000: bad_argument');
    is(code_of(sub { Tokenlock->acquire($L, slots => 2, shared => 0) }), 'bad_argument', 'slots with shared => 0: bad_argument');
    my $got = Tokenlock::with_lock($L, sub { $_[0]->mode }, shared => 1);
    is($got, 'shared', 'with_lock takes shared => 1');
    is(scalar(shares_in($L)), 2, 'and leaves the others\' shares');

    # A shared hold has no fence: the fenced commit refuses it.
    my $f = "$dir/target";
    spit($f, "old\n");
    my $t = Tokenlock::Files::_resolve_target('write', $f, 0);
    my $ok = eval { Tokenlock::Update::_commit($a, $t, "new\n", 'none', 0644); 1 };
    is(!$ok && ref $@ && $@->code, 'bad_argument', 'a commit through a shared hold: bad_argument');
    like($@, qr/a shared hold gives no fence; take the lock exclusively to write/, 'saying why');
    is(slurp($f), "old\n", 'and the target is untouched');
    is_deeply([grep { /\.tmp\./ } entries($dir)], [], 'with no temporary file left');
    $a->release;
    $b->release;
    is(token_of($L), 'lockfile', 'free after both');
}

# Mode and limit: a reader at a semaphore waits, and names both.
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, slots => 3);
    my $ok = eval { Tokenlock->acquire($L, shared => 1, wait => 0) };
    is(ref $@ && $@->code, 'busy', 'a reader at a semaphore of 3: busy');
    like($@, qr/semaphore of 3.*asks for a shared hold/, 'naming both');
    is(code_of(sub { Tokenlock->acquire($L, slots => 5, wait => 0.05) }), 'timed_out', 'a semaphore of 5 at one of 3 waits');
    is_deeply([shares_in($L)], [], 'neither joined: the lone share was not converted');
    $a->release;
    my $one = Tokenlock->acquire($L, slots => 1);
    is(code_of(sub { Tokenlock->acquire($L, slots => 1, wait => 0) }), 'busy', 'a semaphore of 1 admits one');
    is_deeply([shares_in($L)], [], 'and never converts');
    $one->release;
}

# Owner marks (GlusterFS): shared modes are refused there.
{
    my $L = fresh();
    Tokenlock->acquire($L)->release;
    local $Tokenlock::Marks::OWNER_MARKS{$L} = 1;
    my $ok = eval { Tokenlock->acquire($L, shared => 1) };
    is(ref $@ && $@->code, 'not_supported', 'a shared lock where owner marks are made: not_supported');
    like($@, qr/owner marks/, 'saying why');
    is(token_of($L), 'lockfile', 'the lock untouched');
}

# --- stale and planted entries ----------------------------------------------------
my $PAST = int((time - 3600) * 1_000_000);
my $FAR  = int((time + 3 * 86400) * 1_000_000);

sub stale_entry { my ($e) = @_; return "s.$e.$HOST_TAG.$$.$START." . sprintf('%016x', int(rand(2**32)) * 65536 + ++$n) }

{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1);
    my $b = Tokenlock->acquire($L, shared => 1);
    my $tok = "$L/" . token_of($L);
    my $victim_dir = "$dir/victim-dir";
    mkdir $victim_dir or die;
    spit("$victim_dir/keep", 'keep');
    my $victim = "$dir/victim";
    spit($victim, 'data');
    my %plant = (
        'a directory'                => sub { mkdir $_[0], 0700 or die $! },
        'a symbolic link to a directory' => sub { symlink($victim_dir, $_[0]) or die $! },
        'a FIFO'                     => sub { POSIX::mkfifo($_[0], 0600) or die $! },
        'a file'                     => sub { spit($_[0], '') },
        'a hard link to a file'      => sub { link($victim, $_[0]) or die $! },
    );
    my %name;
    for my $what (sort keys %plant) {
        $name{$what} = stale_entry($PAST);
        $plant{$what}->("$tok/$name{$what}");
    }
    my $far = stale_entry($FAR);
    mkdir "$tok/$far" or die;
    my $live_lookalike = $b->token;
    $a->release;
    ok((grep { $_ eq $live_lookalike } shares_in($L)), 'a leaver that is not last leaves the others\' entries');
    $b->release;
    is(token_of($L), 'lockfile', 'the last one out frees a token whose other entries are stale');
    is_deeply([shares_in($L)], [], "every stale entry removed by its name: @{[ join ', ', sort keys %plant ]}, "
          . 'and one dated more than 24 h ahead');
    is(slurp("$victim_dir/keep"), 'keep', 'the directory a link pointed to is untouched');
    is(slurp($victim), 'data', 'the hard-linked file keeps its data');
    is((stat $victim)[3], 1, 'and lost only the entry\'s name');
}

# A malformed s. entry is lock_corrupt to the last one out and to a writer,
# never removed; a non-empty directory at a stale entry's name as well.
for my $case (['a malformed entry', 's.not-an-entry', sub { mkdir $_[0] or die }],
    ['a non-empty directory at a stale entry\'s name', stale_entry($PAST), sub { mkdir $_[0] or die; spit("$_[0]/x", '') }])
{
    my ($what, $entry, $make) = @$case;
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1);
    my $b = Tokenlock->acquire($L, shared => 1);
    $make->("$L/" . token_of($L) . "/$entry");
    $a->release;
    my $ok = eval { $b->release; 1 };
    is(!$ok && ref $@ && $@->code, 'lock_corrupt', "$what: the last one out reports lock_corrupt");
    like($@, qr/\Q$entry\E/, 'naming the entry');
    ok(!$b->held, 'its own share is gone all the same');
    ok((grep { $_ eq $entry } shares_in($L)), 'the entry is left where it is');
    like(token_of($L), qr/\.11000000[0-9]{12}\./, 'and the cover too: nobody is let in on a guess');
    if ($entry eq 's.not-an-entry') {
        is(code_of(sub { Tokenlock->acquire($L, wait => 0) }), 'lock_corrupt', 'a writer: lock_corrupt');
    }
}

# Something at a holder's own entry name before it makes it is a plant:
# lock_corrupt, and nothing removed.
{
    my $L = fresh();
    my $a = Tokenlock->acquire($L, shared => 1);
    my $lone = token_of($L);
    my $now = int(time * 1_000_000);
    my $plant = 's.' . ($now + 3600 * 1_000_000) . ".$HOST_TAG.$$.$START.abcdefabcdefabcd";
    mkdir "$L/$lone/$plant" or die;
    my $ok = eval {
        no warnings 'redefine';
        local *Tokenlock::Shared::_nonce  = sub { 'abcdefabcdefabcd' };
        local *Tokenlock::Shared::_now_us = sub { $now };
        Tokenlock->acquire($L, shared => 1, wait => 0);
    };
    is(ref $@ && $@->code, 'lock_corrupt', 'a plant at the joiner\'s own entry name: lock_corrupt');
    like($@, qr/\Q$plant\E.*planted/, 'naming it');
    is(token_of($L), $lone, 'the lone share is left as it was');
    is_deeply([shares_in($L)], [$plant], 'the plant too, and the entry made for the lone holder is taken back');
    rmdir "$L/$lone/$plant";
    $a->release;
    is(token_of($L), 'lockfile', 'the lone holder releases as usual');
}

# A writer's mark whose lease ended holds nobody (its expiry is never earlier
# than a member's): taken back like a dead writer's, by a reader and by
# another writer; a live one of another host is waited for, untouched.
{
    my $mark = sub {
        my ($L, $at) = @_;
        Tokenlock->acquire($L)->release;
        rmdir "$L/lockfile" or die $!;
        my $e = int(($at) * 1_000_000);
        my $name = "lockfile.$e.otherhost-0badcafe.4242.12000000000000000777.00000000000000bb";
        mkdir "$L/$name", 0755 or die $!;
        mkdir "$L/$name/s.$e.otherhost-f4523501.4243.778.00000000000000cc", 0700 or die $!;
        return $name;
    };
    my $L = fresh();
    my $name = $mark->($L, time - 10);
    my $w = Tokenlock->acquire($L, wait => 1);
    like($w->token, qr/\Alockfile\.[0-9]+\.\Q$HOST_TAG\E\.$$\./, 'a writer takes another writer\'s mark whose lease ended');
    is_deeply([shares_in($L)], [], 'with the stale entry in it gone');
    $w->release;
    is(token_of($L), 'lockfile', 'and gives it back');

    $L = fresh();
    $name = $mark->($L, time - 10);
    my $r = Tokenlock->acquire($L, shared => 1, wait => 1);
    like($r->token, qr/\.10000000\Q$START12\E\./, 'a reader takes it back too, and holds a lone share');
    is_deeply([shares_in($L)], [], 'no entry left');
    $r->release;

    $L = fresh();
    $name = $mark->($L, time + 60);
    is(code_of(sub { Tokenlock->acquire($L, wait => 0.1) }), 'timed_out', 'a live mark of another host: a writer waits');
    is(code_of(sub { Tokenlock->acquire($L, shared => 1, wait => 0) }), 'busy', 'and so does a reader');
    is(token_of($L), $name, 'the mark is left as it was');
    is(scalar(shares_in($L)), 1, 'with its member');
}

# Tokens that are no directory: no entry is made or listed through them.
{
    my $L = fresh();
    Tokenlock->acquire($L)->release;
    my $target = "$dir/link-target";
    mkdir $target or die;
    my $lone = 'lockfile.' . int((time + 600) * 1_000_000) . ".$STAG.$$.10000000$START12.00000000000000aa";
    rmdir "$L/lockfile" or die;
    symlink($target, "$L/$lone") or die;
    is(code_of(sub { Tokenlock->acquire($L, shared => 1, wait => 0) }), 'busy', 'a symbolic link as a lone share: a reader waits');
    is(code_of(sub { Tokenlock->acquire($L, wait => 0.05) }), 'timed_out', 'and so does a writer');
    is_deeply([entries($target)], [], 'nothing was made through the link');
    unlink "$L/$lone";
    (my $cover = $lone) =~ s/\.10000000/.11000000/;
    mkdir "$target/" . stale_entry($PAST) or die;
    my @before = entries($target);
    symlink($target, "$L/$cover") or die;
    is(code_of(sub { Tokenlock->acquire($L, shared => 1, wait => 0) }), 'busy', 'a symbolic link as a group cover: a reader does not join through it');
    is(code_of(sub { Tokenlock->acquire($L, wait => 0.05) }), 'timed_out', 'a writer neither marks nor takes it');
    is_deeply([entries($target)], \@before, 'nothing made or removed through the link');
    is(token_of($L), $cover, 'and the link is left where it is');
    unlink "$L/$cover";
    POSIX::mkfifo("$L/$lone", 0600) or die;
    is(code_of(sub { Tokenlock->acquire($L, shared => 1, wait => 0) }), 'busy', 'a FIFO as a lone share: a reader waits, never opens it');
    unlink "$L/$lone";
    spit("$L/lockfile", '');
    my $a = Tokenlock->acquire($L, shared => 1);
    ok(-f "$L/" . $a->token, 'a file token admits one lone share (the fast path renames it)');
    is(code_of(sub { Tokenlock->acquire($L, shared => 1, wait => 0) }), 'busy', 'and only one');
    $a->release;
    ok(-f "$L/lockfile", 'given back as the file it was');
    unlink "$L/lockfile";
    mkdir "$L/lockfile" or die;
    $a = Tokenlock->acquire($L, shared => 1);
    chmod 0777, "$L/" . $a->token or die;
    is(code_of(sub { Tokenlock->acquire($L, shared => 1, wait => 0) }), 'untrusted', 'a token writable by others: untrusted');
    is_deeply([shares_in($L)], [], 'no entry made in it');
    chmod 0755, "$L/" . $a->token;
    $a->release;
}

# --- what an implementation that knows only docs/protocol.md sees -------------------
{
    my $L = fresh();
    my $old = old_module();
    my $code = 'use Tokenlock; my $l = eval { Tokenlock->acquire($ARGV[0], wait => 0.2) }; '
      . 'print $l ? "acquired" : ref $@ ? $@->code : "died: $@"; my $h = Tokenlock::holder($ARGV[0]); '
      . 'print " ", $h->{stale} ? "stale" : "live", " ", $h->{same_host} ? "local" : "foreign", "\n"';
    my $old_sees = sub {
        my ($what) = @_;
      SKIP: {
            skip('the module before shared locks needs the source tree\'s git history (a copy has none)', 1) unless $old;
            my ($st, $out, $err) = capture([$^X, "-I$old", '-e', $code, $L], env => { PERL5LIB => undef });
            is($out, "timed_out live foreign\n", "$what: the module before shared locks waits, judging a live token of another host")
              or diag($err);
        }
      SKIP: {
            skip(command_skip('an exclusive acquisition by the command (today\'s)'), 2) unless $cmd;
            my ($st, undef, $err) = capture([$cmd, 'run', '-n', $L, 'true']);
            is($st >> 8, 1, "$what: the command's exclusive acquisition finds it busy") or diag($err);
            unlike($err, qr/corrupt/i, 'never lock_corrupt');
        }
        my $name = token_of($L);
        like($name, token_re(), "$what: a held token of docs/protocol.md's grammar");
        my ($e, $tag) = $name =~ /\Alockfile\.([0-9]+)\.([^.]+)\./;
        isnt($tag, $HOST_TAG, 'of a host tag that is not this host\'s: judged by its lease alone');
        ok($e > time * 1_000_000, 'a lease that is live');
    };
    my $a = Tokenlock->acquire($L, shared => 1, lease => 60);
    $old_sees->('a lone share');
    my $b = Tokenlock->acquire($L, shared => 1, lease => 60);
    $old_sees->('a group cover');
    my $pid = fork_worker(sub { Tokenlock->acquire($L, wait => 60) });
    until_true(sub { token_of($L) =~ /\.12000000[0-9]{12}\./ }, 10) or diag('the writer did not mark');
    $old_sees->('a draining cover');
    is(scalar(shares_in($L)), 2, 'both shares are still there');
    kill 'KILL', $pid;
    reap($pid);
    $a->release;
    $b->release;
    like(token_of($L), qr/\Alockfile\.[0-9]+\.\Q$HOST_TAG\E\.$pid\.[0-9]+\.[0-9a-f]{16}\z/,
        'the last one out handed the lock to the writer that marked it (killed meanwhile)');
    my $w = Tokenlock->try_acquire($L);
    ok($w, 'whose token, its owner dead, is taken over at once');
    $w->release if $w;
}

done_testing();
