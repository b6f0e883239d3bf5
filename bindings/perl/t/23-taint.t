#!/usr/bin/perl
# Under taint mode (perl -T) every operation works with paths the caller
# untainted: what the module reads from the system (/proc, /dev/urandom,
# directory listings) goes into names only once checked.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use TokenlockTest;

my $cmd = tokenlock_command();
my $dir = scratch_dir();
my $lib = "$FindBin::Bin/../lib";

# A stale token and a creation leftover to be taken over and swept, a
# workspace with entries to clear, and a counter to build on.
mkdir "$dir/t.lock" or die;
mkdir "$dir/t.lock/lockfile.1000000.elsewhere-0badc0de.7.0.0123456789abcdef" or die;
mkdir "$dir/t.lock/lockfile.1000000.elsewhere-0badc0de.7.0.0123456789abcdef/w" or die;
spit("$dir/t.lock/lockfile.1000000.elsewhere-0badc0de.7.0.0123456789abcdef/w/.x.tmp.0123456789abcdef", 'x');
mkdir "$dir/t.lock.init.1000000.elsewhere-0badc0de.7.0.0123456789abcdef" or die;

my $script = <<'PERL';
use strict;
use warnings;
use Tokenlock;
my ($dir) = $ARGV[0] =~ /\A(.*)\z/s;    # the caller untaints its paths
$ENV{PATH} = '/usr/bin:/bin';
my $lock = Tokenlock->acquire("$dir/t.lock", wait => 0);
my $t = $lock->refresh(lease => 60);
$lock->release;
Tokenlock::with_lock("$dir/t.lock", sub { 1 });
$Tokenlock::Marks::OWNER_MARKS{"$dir/m.lock"} = 1;
Tokenlock->acquire("$dir/m.lock")->release;
local $ENV{TOKENLOCK_DIR_MODE} = $ENV{TOKENLOCK_DIR_MODE};
my $h = Tokenlock::holder("$dir/t.lock");
print Tokenlock::increment("$dir/c.count"), "\n";
$Tokenlock::Update::LOCAL_FOR{"$dir/c.count.lock"} = 0;
print Tokenlock::increment("$dir/c.count"), "\n";
print Tokenlock::increment("$dir/c.count"), "\n";
Tokenlock::write_file("$dir/f", "x\n", mode => '0600');
Tokenlock::write_file("$dir/f", "y\n", lock => "$dir/f.lock", follow_symlinks => 1);
print "done\n";
PERL
spit("$dir/script.pl", $script);
my ($st, $out, $err) = capture([$^X, '-T', "-I$lib", "$dir/script.pl", $dir], env => { TOKENLOCK_DIR_MODE => '0755' });
is($st, 0, 'perl -T: acquire, refresh, release, with_lock, owner marks, holder, increment with version marks, write_file')
  or diag($err);
is($out, "1\n2\n3\ndone\n", 'every operation ran');
is(slurp("$dir/f"), "y\n", 'the last write is in place');
ok(!-e "$dir/t.lock.init.1000000.elsewhere-0badc0de.7.0.0123456789abcdef", 'the creation leftover was swept');

# --- tainted input: a Tokenlock::Error before anything is touched ------------------
# Perl itself would die with a bare "Insecure dependency in rename" at a
# line of the module, with the operation half done.
my $tdir = "$dir/tainted";
mkdir $tdir or die;
spit("$tdir/page", "kept\n");
spit("$tdir/n.count", "5\n");
my $tainted = <<'PERL';
use strict;
use warnings;
use Tokenlock;
$ENV{PATH} = '/usr/bin:/bin';
my $in = $ARGV[0];                              # tainted: from @ARGV
my ($dir) = $in =~ /\A(.*)\z/s;                 # untainted
my $t = substr($ENV{TAINTED_EMPTY}, 0, 0);      # tainted, and empty
my @cases = (
    ['acquire, a path from @ARGV', "the lock directory \"$in/a.lock\"", sub { Tokenlock->acquire("$in/a.lock", wait => 0) }],
    ['with_lock',                  "the lock directory \"$in/w.lock\"", sub { Tokenlock::with_lock("$in/w.lock", sub { 1 }) }],
    ['increment',                  "the counter file \"$in/n.count\"",  sub { Tokenlock::increment("$in/n.count") }],
    ['write_file',                 "the file \"$in/page\"",             sub { Tokenlock::write_file("$in/page", "new\n") }],
    ['update_file',                "the file \"$in/page\"",             sub { Tokenlock::update_file("$in/page", sub { "new\n" }) }],
    ['write_file, lock from %ENV', "lock \"$dir/l.lock$t\"",            sub { Tokenlock::write_file("$dir/page", "new\n", lock => "$dir/l.lock$t") }],
    ['acquire, lease from %ENV',   'lease "60"',                         sub { Tokenlock->acquire("$dir/e.lock", lease => "60$t") }],
    ['refresh, lease from %ENV',   'lease "60"',                         sub { my $l = Tokenlock->acquire("$dir/r.lock"); $l->refresh(lease => "60$t") }],
    ['acquire, slots from %ENV',   'slots "3"',                          sub { Tokenlock->acquire("$dir/s.lock", slots => "3$t") }],
    ['the command option',         'the tokenlock command "/bin/true"',  sub { Tokenlock::increment("$dir/n.count", command => "/bin/true$t") }],
);
for my $c (@cases) {
    my ($what, $named, $code) = @$c;
    my $ok = eval { $code->(); 1 };
    my $e = $@;
    my $got = $ok ? 'no error' : !ref $e ? "plain: $e" : ref($e) . ' ' . $e->code;
    print "$what\t$got\t", ($ok || !ref $e ? '' : index($e->message, "$named is tainted") >= 0 ? 'named' : 'unnamed: ' . $e->message),
      "\t", ($ok || !ref $e ? '' : $e->message =~ /perl -T.*untaint it with a regex/ ? 'fix' : 'no fix'), "\n";
}
# What only reads is allowed with a tainted path, as perl -T allows it.
print "holder\t", (defined Tokenlock::holder("$in/h.lock") ? 'held' : 'free'), "\n";
print "read_counter\t", Tokenlock::read_counter("$in/n.count"), "\n";
PERL
spit("$dir/tainted.pl", $tainted);
($st, $out, $err) = capture([$^X, '-T', "-I$lib", "$dir/tainted.pl", $tdir], env => { TAINTED_EMPTY => 'x' });
is($st, 0, 'perl -T with tainted input: the script runs to its end') or diag($err);
my @lines = split /\n/, $out;
is(scalar(@lines), 12, 'every case reported') or diag($out);
for my $line (@lines[0 .. 9]) {
    my ($what, $got, $named, $fix) = split /\t/, $line;
    is($got, 'Tokenlock::Error bad_argument', "$what: a Tokenlock::Error, bad_argument");
    is($named, 'named', "$what: the message says what is tainted, and names it");
    is($fix, 'fix', "$what: and how to untaint it");
}
is($lines[10], "holder\tfree", 'holder reads with a tainted path');
is($lines[11], "read_counter\t5", 'so does read_counter');
is(slurp("$tdir/page"), "kept\n", 'the file is intact');
is(slurp("$tdir/n.count"), "5\n", 'the counter is intact');
# r.lock: the refresh case's own lock, acquired with untainted input.
is(join(' ', entries($tdir)), 'n.count page r.lock', 'no other lock directory, no temporary file was made');
is(join(' ', entries("$tdir/r.lock")), 'lockfile', 'the lock whose refresh was refused was released with its object');

done_testing();
