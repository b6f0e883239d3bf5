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
$Tokenlock::OWNER_MARKS{"$dir/m.lock"} = 1;
Tokenlock->acquire("$dir/m.lock")->release;
local $ENV{TOKENLOCK_DIR_MODE} = $ENV{TOKENLOCK_DIR_MODE};
my $h = Tokenlock::holder("$dir/t.lock");
print Tokenlock::increment("$dir/c.count"), "\n";
$Tokenlock::LOCAL_FOR{"$dir/c.count.lock"} = 0;
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

done_testing();
