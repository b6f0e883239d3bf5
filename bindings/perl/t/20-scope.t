#!/usr/bin/perl
# with_lock and DESTROY: the lock is released however the code leaves, and
# never by a forked child.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

use Tokenlock qw(with_lock);

my $cmd = tokenlock_command();
my $dir = scratch_dir();
my $L   = "$dir/s.lock";

sub state_of { lock_status($L)->{state} }

# --- with_lock: return values, in the caller's context ------------------------
{
    my $seen;
    my $r = with_lock($L, sub {
        my ($lock) = @_;
        $seen = lock_status($L);
        is($seen->{token}, $lock->token, 'the code gets the lock object, and the lock is held');
        return wantarray ? 'list' : 'scalar';
    });
    is($r, 'scalar', 'scalar context reaches the code, and its value comes back');
    is($seen->{pid}, $$, 'the lock was held by this process');
    is(state_of(), 'free', 'released after a normal return');

    my @r = with_lock($L, sub { return (1, 2, 3) });
    is_deeply(\@r, [1, 2, 3], 'a list comes back in list context');

    my $ctx;
    with_lock($L, sub { $ctx = defined(wantarray) ? 'not void' : 'void' });
    is($ctx, 'void', 'void context reaches the code');
    is(state_of(), 'free', 'released');
}

# --- with_lock: the code dies ------------------------------------------------
{
    my $ok = eval { with_lock($L, sub { die "boom\n" }); 1 };
    ok(!$ok, 'a dying block makes with_lock die');
    is($@, "boom\n", 'with the block\'s own error');
    is(state_of(), 'free', 'after releasing the lock');

    my $obj = bless {}, 'My::Error';
    $ok = eval { with_lock($L, sub { die $obj }); 1 };
    ok(!$ok && ref $@ && $@ == $obj, 'an error object is rethrown as the same object');
    is(state_of(), 'free', 'released');

    # The code released the lock itself: nothing is left to release.
    my @warnings;
    local $SIG{__WARN__} = sub { push @warnings, @_ };
    my $r = with_lock($L, sub { $_[0]->release; 'done' });
    is($r, 'done', 'the code may release the lock itself');
    is(scalar @warnings, 0, 'without a complaint') or diag(@warnings);

    # Taken over while the code ran: the caller must hear of it, since
    # another process may have been in the critical section.
    $ok = eval {
        with_lock($L, sub {
            my ($broken, $err) = break_token($L, $_[0]->token);
            die "break failed: $err\n" unless $broken;
            'finished';
        });
        1;
    };
    ok(!$ok, 'a lock lost while the code ran makes with_lock die');
    is(ref $@ ? $@->code : $@, 'lock_lost', 'with lock_lost');

    # Both: the code's error wins, the loss is a warning.
    @warnings = ();
    $ok = eval {
        with_lock($L, sub {
            break_token($L, $_[0]->token);
            die "code failed\n";
        });
        1;
    };
    is($@, "code failed\n", 'a dying block whose lock was lost: the block\'s error');
    like(join('', @warnings), qr/does not hold/, 'and the loss as a warning');
    is(state_of(), 'free', 'free');

    # Busy: the code does not run.
    my $holder = Tokenlock->acquire($L);
    my $ran = 0;
    $ok = eval { with_lock($L, sub { $ran = 1 }, wait => 0); 1 };
    ok(!$ok && $@->code eq 'busy' && !$ran, 'busy: with_lock dies with busy and does not run the code');
    $holder->release;
    ok(!eval { with_lock($L, 'not code'); 1 } && $@->code eq 'bad_argument', 'a non-code argument is a usage error');
}

# --- DESTROY --------------------------------------------------------------------
{
    {
        my $lock = Tokenlock->acquire($L);
        is(state_of(), 'held', 'held in scope');
    }
    is(state_of(), 'free', 'released when the object goes out of scope');

    # An exception unwinding past the object.
    eval {
        my $lock = Tokenlock->acquire($L);
        die "unwind\n";
    };
    is($@, "unwind\n", 'the exception passes');
    is(state_of(), 'free', 'and the lock was released on the way');

    # DESTROY leaves $@ and $? alone.
    eval {
        my $lock = Tokenlock->acquire($L);
        $? = 7;
        die "kept\n";
    };
    is($@, "kept\n", 'DESTROY does not clobber $@');
    is($?, 7, 'nor $?');
    $? = 0;
}

# --- a forked child never releases its parent's lock ---------------------------
{
    my $lock = Tokenlock->acquire($L);
    my $token = $lock->token;
    pipe(my $r, my $w) or die $!;
    my $child = fork_worker(sub {
        close $r;
        my $ok = eval { $lock->release; 1 };
        syswrite $w, ($ok ? 'released' : $@->code) . "\n";
        syswrite $w, ($lock->held ? 'held' : 'not held') . "\n";
        my @warnings;
        local $SIG{__WARN__} = sub { push @warnings, @_ };
        undef $lock;    # DESTROY runs here, in the child
        syswrite $w, "destroyed, " . scalar(@warnings) . " warnings\n";
    });
    close $w;
    is(read_line($r), 'not_owner', 'release in a forked child fails with not_owner');
    is(read_line($r), 'not held',  'the child\'s copy does not count as held');
    is(read_line($r), 'destroyed, 0 warnings', 'the child destroyed its copy without trying to release it');
    is(reap($child), 0, 'the child ended well');
    my $st = lock_status($L);
    is($st->{token}, $token, 'the parent still holds the lock after that');
    is($st->{pid},   $$,     'as its owner');

    # A child that simply exits: global destruction, END blocks.
    $child = fork();
    die $! unless defined $child;
    if ($child == 0) { exit 0 }
    is(reap($child), 0, 'a child that exits normally');
    is(lock_status($L)->{token}, $token, 'leaves the parent\'s lock held too');

    ok(eval { $lock->release; 1 }, 'and the parent releases it') or diag($@);
}

# --- a holder that dies is noticed at once ------------------------------------
{
    pipe(my $r, my $w) or die $!;
    my $child = fork_worker(sub {
        close $r;
        my $lock = Tokenlock->acquire($L);
        syswrite $w, $lock->token . "\n";
        kill 'KILL', $$;
    });
    close $w;
    my $dead = read_line($r);
    reap($child);
    like($dead, token_re(), 'a child took the lock and was killed');
    my $lock = Tokenlock->acquire($L, wait => 0);
    ok($lock, 'the lock of a killed holder is taken over at once (wait => 0)');
    isnt($lock->token, $dead, 'with a new token');
    $lock->release;
}

done_testing();
