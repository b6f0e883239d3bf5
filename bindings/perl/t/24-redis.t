#!/usr/bin/perl
# Tokenlock::Redis: a lock that is a name in a real redis-server, reached
# through the command, shared with the command's own --redis forms.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use IO::Handle;
use POSIX ();
use Time::HiRes ();
use TokenlockTest;
use Tokenlock;

my $cmd = tokenlock_command();
skip_all_without_command('Tokenlock::Redis (it goes through the command)');
my $dir = scratch_dir();
my $url = redis_server($dir);
my $sock = "$dir/redis.sock";

sub code_of { my ($code) = @_; my $ok = eval { $code->(); 1 }; return $ok ? 'ok' : ref $@ ? $@->code : "died: $@" }
sub cmd_acquire {
    my ($name) = @_;
    my ($st, $out) = capture([$cmd, 'acquire', '-n', '--redis', $url, $name]);
    chomp $out;
    return ($st >> 8, $out);
}

# --- held by Perl, refused to the command, and the other way round --------
{
    my $lock = Tokenlock::Redis->acquire($url, 'a', lease => 30);
    like($lock->token, qr/\A[0-9]+\.[A-Za-z0-9_-]+-[0-9a-f]{8}\.[0-9]+\.[0-9]+\.[0-9a-f]{16}\z/, 'a token: fence.owner');
    ok($lock->held, 'held');
    my ($st) = cmd_acquire('a');
    is($st, 1, 'the command is refused while Perl holds it');
    is(Tokenlock::Redis->try_acquire($url, 'a'), undef, 'try_acquire in Perl is refused too');
    my $h = Tokenlock::Redis::holder($url, 'a');
    is($h->{token}, $lock->token, 'holder names our token');
    is($h->{fence}, $lock->fence, 'and our fence');
    is($lock->refresh(lease => 60), $lock->token, 'refresh keeps the token');
    cmp_ok(Tokenlock::Redis::holder($url, 'a')->{remaining_ms}, '>', 30_000, 'refresh set the new lease');
    $lock->release;
    ok(!$lock->held, 'released');
    is(Tokenlock::Redis::holder($url, 'a'), undef, 'holder: free');
    my ($st2, $theirs) = cmd_acquire('a');
    is($st2, 0, 'the command gets it after the release');
    is(Tokenlock::Redis->try_acquire($url, 'a'), undef, 'Perl is refused while the command holds it');
    my ($fence) = $theirs =~ /\A([0-9]+)\./;
    cmp_ok($fence, '>', $lock->fence, 'the fence grew from the Perl grant to the command grant');
    my ($st3) = capture([$cmd, 'release', '--redis', $url, 'a', $theirs]);
    is($st3, 0, 'the command releases');
    my $next = Tokenlock::Redis->acquire($url, 'a', wait => 0);
    cmp_ok($next->fence, '>', $fence, 'and grew again to the next Perl grant');
    $next->release;
}

# --- a lost lock is said at release, and the new owner is left alone ------
{
    my $lock = Tokenlock::Redis->acquire($url, 'lost', lease => 30);
    my ($st) = capture([$cmd, 'break', '--force', '--redis', $url, 'lost', $lock->token]);
    is($st, 0, 'the command breaks our grant');
    my ($st2, $theirs) = cmd_acquire('lost');
    is($st2, 0, 'and another takes the lock');
    is(code_of(sub { $lock->refresh }), 'lock_lost', 'refresh: lock_lost');
    ok(!$lock->held, 'no longer held');
    is(code_of(sub { $lock->release }), 'not_owner', 'release after that: not_owner');
    is(Tokenlock::Redis::holder($url, 'lost')->{token}, $theirs, 'the new owner still holds it');
}
{
    my $lock = Tokenlock::Redis->acquire($url, 'lost2', lease => 30);
    capture([$cmd, 'break', '--force', '--redis', $url, 'lost2', $lock->token]);
    is(code_of(sub { $lock->release }), 'lock_lost', 'release of a broken grant: lock_lost');
}

# --- with_lock ---------------------------------------------------------------
{
    is(Tokenlock::Redis::with_lock($url, 'w', sub { Tokenlock::Redis::holder($url, 'w') ? 42 : 0 }), 42,
        'with_lock runs the code while holding the lock and returns its value');
    is(Tokenlock::Redis::holder($url, 'w'), undef, 'and releases it');
    is(code_of(sub { Tokenlock::Redis::with_lock($url, 'w', sub { die "inner\n" }) }), "died: inner\n",
        'the code\'s error comes out');
    is(Tokenlock::Redis::holder($url, 'w'), undef, 'released after it died');
}

# --- a forked child cannot release its parent's lock -------------------------
{
    my $lock = Tokenlock::Redis->acquire($url, 'fork', lease => 30);
    pipe(my $r, my $w) or die;
    my $child = fork_worker(sub {
        close $r;
        my $code = code_of(sub { $lock->release });
        print $w "$code\n";
        close $w;
    });
    close $w;
    is(read_line($r), 'not_owner', 'a forked child: release is not_owner');
    is(reap($child), 0, 'the child ended cleanly');
    is(Tokenlock::Redis::holder($url, 'fork')->{token}, $lock->token, 'the parent still holds the lock');
    $lock->release;
}

# --- a waiter gets the lock when the holder releases it ----------------------
{
    my $lock = Tokenlock::Redis->acquire($url, 'wait');
    pipe(my $r, my $w) or die;
    my $child = fork_worker(sub {
        close $r;
        my $refused = Tokenlock::Redis->try_acquire($url, 'wait') ? 'granted' : 'refused';
        $w->autoflush(1);
        print $w "$refused\n";
        my $l = Tokenlock::Redis->acquire($url, 'wait', wait => 30);
        print $w $l->fence, "\n";
        close $w;
        $l->release;
    });
    close $w;
    is(read_line($r), 'refused', 'a second process is refused while the lock is held');
    $lock->release;
    my $fence = read_line($r);
    cmp_ok($fence, '>', $lock->fence, 'after the release it gets the lock, with a larger fence');
    is(reap($child), 0, 'the waiter ended cleanly');
}

# --- errors ------------------------------------------------------------------
{
    is(code_of(sub { Tokenlock::Redis->acquire($url, '') }), 'bad_argument', 'an empty name: bad_argument');
    is(code_of(sub { Tokenlock::Redis->acquire($url, 'x', wait => 'soon') }), 'bad_argument', 'a wait that is no number: bad_argument');
    is(code_of(sub { Tokenlock::Redis->acquire($url, 'x', lease => 0) }), 'bad_argument', 'a lease of 0: bad_argument');
    is(code_of(sub { Tokenlock::Redis->acquire('http://127.0.0.1/', 'x', wait => 0) }), 'bad_argument', 'not a Redis URL: bad_argument');
    my $missing = "unix://$dir/nobody.sock";
    is(code_of(sub { Tokenlock::Redis->acquire($missing, 'x', wait => 0) }), 'system', 'an unreachable server: system');
    is($@->errno, POSIX::ENOENT(), 'with the errno of the connect');
    like($@->message, qr/\Q$dir\E\/nobody\.sock.*cannot connect/, 'naming the server and the step');
    is(Tokenlock::Redis::holder($url, 'x'), undef, 'nothing was granted by the failed calls');
}

# --- the password: never on the command's argv, in a message or in a dump ---
{
    my $pw = 's3cr3tPW';
    # Redis 6 and later: the default user without a password takes any.
    my $purl = "unix://default:$pw\@$sock";
    my $lock = eval { Tokenlock::Redis->acquire($purl, 'pw', lease => 30) };
  SKIP: {
        skip 'this redis-server does not take AUTH default with any password: ' . (ref $@ ? $@->message : $@), 4
          unless $lock;
        require Data::Dumper;
        unlike(Data::Dumper::Dumper($lock), qr/\Q$pw\E/, 'a dump of the lock does not show the password');
        is($lock->url, "unix://default:***\@$sock", '->url is masked');
        ok(!exists $ENV{TOKENLOCK_URL}, 'the URL is not left in our own environment');
        ok($lock->release, 'released through the URL in the command\'s environment');
    }
    # A stand-in for the command: it records its argv and environment, and
    # fails saying the URL, as a careless message would.
    my $fake = "$dir/fake-tokenlock";
    spit($fake, "#!/bin/sh\nprintf '%s\\n' \"\$@\" >\"\$0.argv\"\nprintf '%s' \"\$TOKENLOCK_URL\" >\"\$0.env\"\n"
          . "echo \"tokenlock: acquire \$TOKENLOCK_URL: cannot connect (password $pw)\" >&2\nexit 69\n");
    chmod 0755, $fake or die;
    my $bad = "redis://:$pw\@127.0.0.1:1/0";
    is(code_of(sub { Tokenlock::Redis->acquire($bad, 'x', wait => 0, command => $fake) }), 'command_failed',
        'the stand-in fails');
    my $err = $@;
    is(slurp("$fake.env"), $bad, 'the command gets the URL in its environment');
    unlike(slurp("$fake.argv"), qr/\Q$pw\E/, 'and not on its argv');
    like(slurp("$fake.argv"), qr/^env:TOKENLOCK_URL$/m, 'but as --redis env:TOKENLOCK_URL');
    unlike(join(' ', $err->command), qr/\Q$pw\E/, '->command does not show it');
    unlike($err->message, qr/\Q$pw\E/, 'the message does not show it, even where the command said it');
    like($err->message, qr{redis://:\*\*\*\@127\.0\.0\.1:1/0}, 'the URL is shown masked');
    # Malformed URLs, through the real command: whatever is wrong, the
    # password is masked.
    for my $u ("redis://:se?cret$pw\@127.0.0.1:1", "redis://:$pw" . '127.0.0.1:1', "redis//:$pw\@127.0.0.1:1",
        "http://u:$pw\@127.0.0.1:1", "redis://:$pw\@127.0.0.1:notaport")
    {
        my $code = code_of(sub { Tokenlock::Redis->acquire($u, 'x', wait => 0) });
        isnt($code, 'ok', "\"$u\" fails");
        unlike($@->message . join(' ', $@->command), qr/\Q$pw\E/, 'and its message and command do not show the password')
          if ref $@;
    }
}

done_testing();
