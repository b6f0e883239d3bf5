#!/usr/bin/perl
# Tokenlock::Redis shared holds and semaphores, on a real redis-server:
# readers together and never beside a writer, writer preference, slots
# never exceeded, a dead reader's share freed by its lease, the command's
# own readers in the same lock, and bad modes refused before any command.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use Fcntl qw(:flock);
use IO::Handle;
use IO::Select;
use POSIX ();
use Time::HiRes ();
use TokenlockTest;
use Tokenlock;

my $cmd = tokenlock_command();
skip_all_without_command('Tokenlock::Redis shared holds (they go through the command)');
my $dir = scratch_dir();
my $url = redis_server($dir);

sub code_of { my ($code) = @_; my $ok = eval { $code->(); 1 }; return $ok ? 'ok' : ref $@ ? $@->code : "died: $@" }
sub modes { join ',', sort map { $_->{waiting_writer} ? 'waiting' : $_->{slots} ? "slot/$_->{slots}" : $_->{mode} } @_ }
sub now { Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) }

# --- readers hold together, and no writer beside them -------------------
{
    my @r = map { Tokenlock::Redis->acquire($url, 'read', shared => 1, wait => 0, lease => 30) } 1 .. 3;
    is(scalar(grep { $_->held } @r), 3, 'three readers hold at once');
    my @h = Tokenlock::Redis::holders($url, 'read');
    is(modes(@h), 'shared,shared,shared', 'holders lists three shared holders');
    is_deeply([sort map { $_->{token} } @h], [sort map { $_->token } @r], 'by the tokens the readers hold');
    ok(!grep({ exists $_->{fence} } @h), 'with no fence: a shared grant has none');
    is($r[0]->mode, 'shared', '->mode: shared');
    is($r[0]->slots, 0, '->slots: 0 for a reader');
    is(Tokenlock::Redis::holder($url, 'read')->{mode}, 'shared', 'holder gives one of them');
    is(Tokenlock::Redis->try_acquire($url, 'read'), undef, 'a writer is refused beside them');
    is($r[0]->refresh(lease => 60), $r[0]->token, 'a reader refreshes its own lease, keeping its token');
    my ($mine) = grep { $_->{token} eq $r[0]->token } Tokenlock::Redis::holders($url, 'read');
    cmp_ok($mine->{remaining_ms}, '>', 30_000, 'and only its lease grew');
    ok($_->release, 'a reader releases') for @r;
    is_deeply([Tokenlock::Redis::holders($url, 'read')], [], 'free once the three have left');

    my $w = Tokenlock::Redis->acquire($url, 'read', wait => 0, lease => 30);
    is($w->mode, 'exclusive', 'a writer after them');
    like($w->fence, qr/\A[0-9]+\z/, 'has its fence');
    my $t0 = now();
    is(code_of(sub { Tokenlock::Redis->acquire($url, 'read', lock_type => LOCK_SH | LOCK_NB) }), 'busy',
        'lock_type LOCK_SH|LOCK_NB beside a writer: busy');
    cmp_ok(now() - $t0, '<', 5, 'at once: LOCK_NB tries once');
    $w->release;
    my $r = Tokenlock::Redis->acquire($url, 'read', lock_type => 'SH');
    is($r->mode, 'shared', 'lock_type SH: a reader');
    $r->release;
    is(Tokenlock::Redis::holder($url, 'read'), undef, 'free at the end');
}

# --- a writer waits for readers, and bars new ones meanwhile --------------
{
    my $reader = Tokenlock::Redis->acquire($url, 'wq', shared => 1, lease => 30);
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $writer = fork_worker(sub {
        close $rd;
        $wr->autoflush(1);
        my $w = Tokenlock::Redis->acquire($url, 'wq', wait => 30, lease => 30);
        print $wr $w->fence, "\n";
        $w->release;
        close $wr;
    });
    close $wr;
    ok(until_true(sub { grep { $_->{waiting_writer} } Tokenlock::Redis::holders($url, 'wq') }, 20),
        'the writer waits: its mark is listed');
    is(modes(Tokenlock::Redis::holders($url, 'wq')), 'shared,waiting', 'beside the reader that holds');
    is(Tokenlock::Redis->try_acquire($url, 'wq', shared => 1), undef, 'a new reader is barred while the writer waits');
    is(code_of(sub { Tokenlock::Redis->acquire($url, 'wq', shared => 1, wait => 0.3) }), 'timed_out',
        'and one that waits a little times out');
    ok(!IO::Select->new($rd)->can_read(0), 'the writer has not been granted while the reader holds');
    $reader->release;
    my $fence = read_line($rd);
    like($fence, qr/\A[0-9]+\z/, 'the writer gets the lock once the reader left');
    is(reap($writer), 0, 'the writer ended cleanly');
    is(Tokenlock::Redis::holder($url, 'wq'), undef, 'free at the end, no mark left');
}

# --- a semaphore of N: never more than N holders under churn -------------
{
    my ($n, $procs, $rounds) = (2, 5, 4);
    my $count = "$dir/inside";
    spit($count, "0 0 0\n");
    # inside, the most inside at once, grants: changed under flock, which
    # is this test's own tool, not the lock under test.
    my $bump = sub {
        my ($by) = @_;
        open(my $fh, '+<', $count) or die "open $count: $!";
        flock($fh, LOCK_EX) or die "flock $count: $!";
        my ($in, $max, $grants) = split ' ', scalar <$fh>;
        $in += $by;
        $max = $in if $in > $max;
        $grants++ if $by > 0;
        seek($fh, 0, 0);
        truncate($fh, 0);
        print $fh "$in $max $grants\n";
        close $fh or die "close $count: $!";
        return $in;
    };
    my @kids = map {
        fork_worker(sub {
            for (1 .. $rounds) {
                Tokenlock::Redis::with_lock($url, 'sem', sub {
                    $bump->(1);
                    # The work the slot guards: the server's own count,
                    # which must not pass N either.
                    my @h = Tokenlock::Redis::holders($url, 'sem');
                    die "the server lists " . scalar(@h) . " holders of a semaphore of $n\n" if @h > $n;
                    $bump->(-1);
                }, slots => $n, wait => 60, lease => 30);
            }
        });
    } 1 .. $procs;
    is(reap($_), 0, 'a churning process ended cleanly') for @kids;
    my ($in, $max, $grants) = split ' ', slurp($count);
    cmp_ok($max, '<=', $n, "never more than $n inside at once (at most $max)");
    is($grants, $procs * $rounds, 'every process had each of its turns');
    is($in, 0, 'nobody is left inside');
    is_deeply([Tokenlock::Redis::holders($url, 'sem')], [], 'the semaphore is free at the end');
}

# --- a reader killed with kill -9 holds until its lease ends -------------
{
    my $lease = 2;
    my $before = now();
    pipe(my $rd, my $wr) or die "pipe: $!";
    pipe(my $never, my $hold) or die "pipe: $!";
    my $reader = fork_worker(sub {
        close $rd;
        close $hold;
        $wr->autoflush(1);
        my $r = Tokenlock::Redis->acquire($url, 'kill', shared => 1, lease => $lease);
        print $wr $r->token, "\n";
        <$never>;   # killed here
    });
    close $wr;
    close $never;
    my $token = read_line($rd);
    ok(defined $token, 'the reader holds');
    kill 'KILL', $reader;
    is(reap($reader) & 127, 9, 'the reader died by SIGKILL');
    is(join(',', map { $_->{token} } Tokenlock::Redis::holders($url, 'kill')), $token,
        'its share stays listed: Redis cannot see that its owner died');
    is(Tokenlock::Redis->try_acquire($url, 'kill'), undef, 'a writer is refused while its lease lasts');
    my $w = Tokenlock::Redis->acquire($url, 'kill', wait => 20, lease => 30);
    my $waited = now() - $before;
    ok($w->held, 'a writer gets the lock once the dead reader\'s lease ended');
    cmp_ok($waited, '>=', $lease - 0.05, "not before its $lease s lease ended (${waited} s after the reader began)");
    is(modes(Tokenlock::Redis::holders($url, 'kill')), 'exclusive', 'the dead reader\'s share is gone');
    $w->release;
    close $hold;
}

# --- a reader whose lease ended is told so, and leaves the writer alone ---
{
    for my $step (qw(refresh release)) {
        my $r = Tokenlock::Redis->acquire($url, "lost-$step", shared => 1, lease => 1);
        my $w = Tokenlock::Redis->acquire($url, "lost-$step", wait => 20, lease => 30);
        is(code_of(sub { $r->$step }), 'lock_lost', "$step of a share whose lease ended: lock_lost");
        like($@->message, qr/\Q$url\E lost-\Q$step\E/, 'naming the server and the lock') if ref $@;
        ok(!$r->held, 'the reader holds no more');
        is(code_of(sub { $r->release }), 'not_owner', 'a release after that: not_owner') if $step eq 'refresh';
        is(Tokenlock::Redis::holder($url, "lost-$step")->{token}, $w->token, 'the writer still holds the lock');
        $w->release;
    }
}

# --- a Perl reader and a command reader hold together --------------------
# `tokenlock run` holds the lock while its command runs: that command says
# "held" and waits for its standard input to end.
sub command_holder {
    my (@mode) = @_;
    pipe(my $out_r, my $out_w) or die "pipe: $!";
    pipe(my $in_r, my $in_w) or die "pipe: $!";
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        close $out_r;
        close $in_w;
        open STDOUT, '>&', $out_w or POSIX::_exit(120);
        open STDIN, '<&', $in_r or POSIX::_exit(121);
        { no warnings 'exec'; exec $cmd, 'run', @mode, '-n', '--lease', 30, '--redis', $url, 'mix', '--', 'sh', '-c', 'echo held; cat >/dev/null'; }
        POSIX::_exit(122);
    }
    close $out_w;
    close $in_r;
    return ($pid, $out_r, $in_w);
}
{
    my $r = Tokenlock::Redis->acquire($url, 'mix', shared => 1, lease => 30);
    my ($pid, $out, $in) = command_holder('-s');
    is(read_line($out), 'held', 'tokenlock run -s --redis runs beside the Perl reader');
    is(modes(Tokenlock::Redis::holders($url, 'mix')), 'shared,shared', 'two shared holders are listed');
    my $r2 = Tokenlock::Redis->try_acquire($url, 'mix', shared => 1);
    ok($r2 && $r2->held, 'a second Perl reader joins them');
    is(Tokenlock::Redis->try_acquire($url, 'mix'), undef, 'a Perl writer is refused beside them');
    close $in;
    is(reap($pid), 0, 'the command reader ended cleanly, releasing its share');
    is(modes(Tokenlock::Redis::holders($url, 'mix')), 'shared,shared', 'the Perl readers still hold');
    $_->release for $r, $r2;
    my ($st, undef, $err) = capture([$cmd, 'run', '-n', '-s', '--redis', $url, 'mix', '--', 'true']);
    is($st, 0, 'and the command takes it shared again after them') or diag $err;

    # A semaphore of 2 shared across both: the third holder is refused.
    my $s = Tokenlock::Redis->acquire($url, 'mix', slots => 2, lease => 30);
    ($pid, $out, $in) = command_holder('--slots', 2);
    is(read_line($out), 'held', 'tokenlock run --slots 2 takes the second slot');
    is(modes(Tokenlock::Redis::holders($url, 'mix')), 'slot/2,slot/2', 'two holders of a semaphore of 2');
    is(Tokenlock::Redis->try_acquire($url, 'mix', slots => 2), undef, 'a third is refused: the slots are full');
    is(Tokenlock::Redis->try_acquire($url, 'mix', shared => 1), undef, 'so is a reader without the count');
    close $in;
    is(reap($pid), 0, 'the command ended cleanly');
    my $s2 = Tokenlock::Redis->try_acquire($url, 'mix', slots => 2);
    ok($s2, 'its slot is free for the next');
    $_->release for $s, $s2;
    is(Tokenlock::Redis::holder($url, 'mix'), undef, 'free at the end');
}

# --- bad modes: the module's usage error, before any command runs --------
{
    my $fake = "$dir/fake-tokenlock";
    spit($fake, "#!/bin/sh\n: >\"\$0.ran\"\nexit 69\n");
    chmod 0755, $fake or die "chmod $fake: $!";
    my @bad = ([slots => 0], [slots => 1_000_000], [slots => 'two'], [slots => 2, shared => 0],
        [shared => 1, lock_type => LOCK_EX], [lock_type => LOCK_SH | LOCK_EX], [lock_type => 'SOMETIMES']);
    for my $b (@bad) {
        my $what = join ' => ', @$b;
        is(code_of(sub { Tokenlock::Redis->acquire($url, 'bad', @$b, command => $fake) }), 'bad_argument',
            "acquire with $what: bad_argument");
        like($@->message, qr/\Qbad\E: (?:slots|shared|lock_type)/, 'naming the lock and the option') if ref $@;
        is(code_of(sub { Tokenlock::Redis->try_acquire($url, 'bad', @$b, command => $fake) }), 'bad_argument',
            "try_acquire with $what: bad_argument");
        is(code_of(sub { Tokenlock::Redis::with_lock($url, 'bad', sub { }, @$b, command => $fake) }), 'bad_argument',
            "with_lock with $what: bad_argument");
    }
    ok(!-e "$fake.ran", 'the command never ran');
    is(code_of(sub { Tokenlock::Redis::holders($url, 'bad', shared => 1) }), 'bad_argument', 'holders takes no mode');
    is(Tokenlock::Redis::holder($url, 'bad'), undef, 'nothing was granted');

    # A fenced write needs the fence, which a shared hold has not.
    my $r = Tokenlock::Redis->acquire($url, 'bad', shared => 1, lease => 30);
    is(code_of(sub { $r->fence }), 'bad_argument', '->fence of a shared hold: bad_argument');
    like($@->message, qr/a shared hold gives no fence; take the lock exclusively to write/, 'saying to take it exclusively');
    ok($r->held, 'the hold is kept');
    $r->release;
    my $s = Tokenlock::Redis->acquire($url, 'bad', slots => 3, lease => 30);
    is(code_of(sub { $s->fence }), 'bad_argument', 'so of a semaphore\'s slot');
    $s->release;
    is(Tokenlock::Redis::holder($url, 'bad'), undef, 'free at the end');
}

done_testing();
