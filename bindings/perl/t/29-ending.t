#!/usr/bin/perl
# A script that ends while it holds a lock releases it, however it ends:
# dying (through the stack, or at the top), exit, the end of the program
# with the lock in a global, and SIGTERM, SIGINT and SIGHUP. Right after,
# the token is back as lockfile (released, not left to be taken over) and
# a second process gets the lock with no wait.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use POSIX ();
use TokenlockTest;

use Tokenlock;

tokenlock_command();
my $dir = scratch_dir();
my $lib = "$FindBin::Bin/../lib";
my $n   = 0;

# Runs the holder script $body with the lock directory as $L; it prints
# "held" once it holds the lock. $then->($pid) acts on it after that.
# Returns (wait status, stderr, the lock directory).
sub run_holder {
    my ($body, $then) = @_;
    my $L = "$dir/e" . ++$n . '.lock';
    spit("$dir/holder$n.pl", "use strict; use warnings; use Tokenlock; \$| = 1;\nmy \$L = \$ARGV[0];\n$body");
    pipe(my $r, my $w) or die "pipe: $!";
    pipe(my $hold_r, my $hold_w) or die "pipe: $!";
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if (!$pid) {
        close $r;
        close $hold_w;
        open STDOUT, '>&', $w or POSIX::_exit(121);
        open STDIN, '<&', $hold_r or POSIX::_exit(120);
        open STDERR, '>', "$dir/holder$n.err" or POSIX::_exit(122);
        { no warnings 'exec'; exec { $^X } $^X, "-I$lib", "$dir/holder$n.pl", $L; }
        POSIX::_exit(123);
    }
    close $w;
    close $hold_r;
    my $said = read_line($r);
    is($said, 'held', "holder $n holds the lock");
    $then->($pid) if $then;
    close $hold_w;    # a holder reading its stdin goes on
    waitpid($pid, 0);
    return ($?, slurp("$dir/holder$n.err"), $L);
}

# Right after the holder ended: released, and free for another process.
sub free_after {
    my ($L, $what) = @_;
    is(join(' ', entries($L)), 'lockfile', "$what: the token is back as lockfile (released)");
    my $pid = fork_worker(sub { Tokenlock->acquire($L, wait => 0)->release });
    is(reap($pid), 0, "$what: another process gets the lock at once (wait => 0)");
}

my @cases = (
    ['dies through the stack', <<'PERL', sub { $_[0] >> 8 != 0 }],
sub work { my $lock = Tokenlock->acquire($L); print "held\n"; <STDIN>; die "work failed\n" }
sub outer { work(); return 1 }
outer();
PERL
    ['dies at the top, the lock in a file-scoped lexical', <<'PERL', sub { $_[0] >> 8 != 0 }],
my $lock = Tokenlock->acquire($L);
print "held\n";
<STDIN>;
die "failed\n";
PERL
    ['calls exit with the lock in a sub\'s lexical', <<'PERL', sub { $_[0] >> 8 == 3 }],
sub work { my $lock = Tokenlock->acquire($L); print "held\n"; <STDIN>; exit 3 }
work();
PERL
    ['ends with the lock in a global (released by END or global destruction)', <<'PERL', sub { $_[0] == 0 }],
our $LOCK = Tokenlock->acquire($L);
print "held\n";
<STDIN>;
PERL
    ['calls exit inside with_lock', <<'PERL', sub { $_[0] >> 8 == 4 }],
Tokenlock::with_lock($L, sub { print "held\n"; <STDIN>; exit 4 });
PERL
);
for my $c (@cases) {
    my ($what, $body, $status_ok) = @$c;
    my ($st, $err, $L) = run_holder($body);
    ok($status_ok->($st), "$what: the script ended as it should (status $st)") or diag($err);
    unlike($err, qr/Tokenlock/, "$what: without a warning from the module") or diag($err);
    free_after($L, $what);
}

# --- signals: the process still ends by the signal -----------------------------------
for my $sig (qw(TERM INT HUP)) {
    # A job started in the background by a shell without job control
    # inherits SIGINT ignored; the case is the default disposition.
    my ($st, $err, $L) = run_holder(<<'PERL', sub { kill $sig, $_[0] });
$SIG{$_} = 'DEFAULT' for qw(TERM INT HUP);
my $lock = Tokenlock->acquire($L);
print "held\n";
sleep 60 while 1;
PERL
    is($st & 127, POSIX->can("SIG$sig")->(), "SIG$sig: the holder ended by the signal, as without the module")
      or diag("status $st: $err");
    free_after($L, "SIG$sig");
}

# A handler of the script's own is left alone: the script decides.
{
    my ($st, $err, $L) = run_holder(<<'PERL', sub { kill 'TERM', $_[0] });
$SIG{TERM} = sub { print STDERR "own handler\n"; exit 9 };
my $lock = Tokenlock->acquire($L);
print "held\n";
sleep 60 while 1;
PERL
    is($st >> 8, 9, 'a script\'s own SIGTERM handler runs, not the module\'s');
    like($err, qr/own handler/, 'as it said');
    free_after($L, 'own handler that exits');
}

# A forked child killed by SIGTERM never releases its parent's lock.
{
    my $L = "$dir/parent.lock";
    my $lock = Tokenlock->acquire($L);
    my $token = $lock->token;
    pipe(my $r, my $w) or die;
    my $child = fork;
    die "fork: $!" unless defined $child;
    if (!$child) { close $r; syswrite $w, "ready\n"; sleep 60 while 1; POSIX::_exit(0) }
    close $w;
    is(read_line($r), 'ready', 'a forked child runs');
    kill 'TERM', $child;
    waitpid($child, 0);
    is($? & 127, POSIX::SIGTERM(), 'the child ended by SIGTERM');
    is(join(' ', entries($L)), $token, 'the parent\'s token is untouched');
    ok($lock->held, 'the parent still holds the lock');
    $lock->release;
}

done_testing();
