#!/usr/bin/perl
# The cost per call of the Perl module against what a Perl programmer
# writes by hand, side by side in one run:
#   lock: Tokenlock::with_lock around an empty block
#         vs two bare rename() calls in a directory (lockfile to a token name
#         and back: the protocol's floor, what the widely copied rename
#         lock costs)
#         and vs open + flock(LOCK_EX) + close of a lock file;
#   incr: Tokenlock::increment
#         vs a flock'ed counter: flock, read, write a temporary file, rename,
#         with the same durability (--sync: fsync of the file, and of the
#         directory for file_and_dir, as bench/cgi/flock_counter.c does).
#
#   perl_bench.pl [-q] [-n CALLS] [-r ROUNDS] [--sync none|file|file_and_dir] [-d DIR]
#
# Each round times CALLS calls of each variant, in an order that rotates
# between rounds; the ratios are medians over rounds of tokenlock / other.
# The last lines are for machines:
#   perl_lock_rename_ratio=X   with_lock / two renames
#   perl_lock_ratio=Y          with_lock / flock
#   perl_incr_ratio=Z          increment / flock'ed counter
# -q: a quick run to check that it works (few calls, two rounds); take
# figures from a full run on a quiet machine.
# Only the module's public API is used. The tokenlock command, for what
# the module still runs it for, is TOKENLOCK_COMMAND, else as Tokenlock.pm
# finds it, else the build tree's.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../bindings/perl/lib";
use Cwd ();
use Fcntl qw(:flock O_RDONLY O_WRONLY O_CREAT O_TRUNC);
use File::Temp ();
use Getopt::Long ();
use IO::Handle ();
use Time::HiRes ();

use Tokenlock ();

my %o = (sync => 'none');
Getopt::Long::Configure('bundling');
Getopt::Long::GetOptions(
    'q|quick'    => \$o{quick},
    'n|calls=i'  => \$o{calls},
    'r|rounds=i' => \$o{rounds},
    'sync=s'     => \$o{sync},
    'd|dir=s'    => \$o{dir},
    'h|help'     => \$o{help},
) or usage(64);
usage(0) if $o{help};
usage(64, "--sync takes none, file or file_and_dir") unless $o{sync} =~ /\A(?:none|file|file_and_dir)\z/;
$o{calls}  = $o{quick} ? 20 : 200 unless defined $o{calls};
$o{rounds} = $o{quick} ? 2  : 5   unless defined $o{rounds};
usage(64, 'CALLS and ROUNDS must be at least 1') if $o{calls} < 1 || $o{rounds} < 1;

sub usage {
    my ($status, $why) = @_;
    print STDERR "perl_bench.pl: $why\n" if $why;
    print STDERR "usage: perl_bench.pl [-q] [-n CALLS] [-r ROUNDS] [--sync none|file|file_and_dir] [-d DIR]\n";
    exit $status;
}

unless (defined $ENV{TOKENLOCK_COMMAND} && length $ENV{TOKENLOCK_COMMAND}) {
    my $built = Cwd::abs_path("$FindBin::Bin/../..") . '/build/tools/tokenlock';
    $ENV{TOKENLOCK_COMMAND} = $built if !eval { Tokenlock::command_path() } && -x $built;
}
# A module that needs no command works without one.
my $cmd = eval { Tokenlock::command_path() } // '(none found)';

my $dir = defined $o{dir}
  ? File::Temp::tempdir('perl-bench-XXXXXX', DIR => $o{dir}, CLEANUP => 1)
  : File::Temp::tempdir('perl-bench-XXXXXX', TMPDIR => 1, CLEANUP => 1);

# --- the variants ------------------------------------------------------------------

my $tl_lock = "$dir/tl.lock";
sub tl_lock { Tokenlock::with_lock($tl_lock, sub { }) }

# The floor is the protocol's own renames: a directory named lockfile and a
# name as long as a real token (docs/protocol.md, Token grammar).
my $rn_file  = "$dir/rn.lock/lockfile";
my $rn_token = "$dir/rn.lock/" . floor_token();
mkdir "$dir/rn.lock" or die "perl_bench.pl: mkdir $dir/rn.lock: $!";
mkdir $rn_file or die "perl_bench.pl: mkdir $rn_file: $!";

sub floor_token {
    require POSIX;
    my $host = substr((POSIX::uname())[1] || 'host', 0, 32);
    $host =~ s/[^A-Za-z0-9-]/_/g;
    return sprintf('lockfile.%d.%s-%08x.%d.%d.%016x', (time + 3600) * 1_000_000, $host, 0, $$, 1234567, 0);
}
sub rn_lock {
    rename($rn_file, $rn_token) or die "rename $rn_file: $!";
    rename($rn_token, $rn_file) or die "rename $rn_token: $!";
}

my $fl_lock = "$dir/fl.lock";
sub fl_lock {
    open(my $fh, '>>', $fl_lock) or die "open $fl_lock: $!";
    flock($fh, LOCK_EX) or die "flock $fl_lock: $!";
    close $fh;
}

my $tl_count = "$dir/tl.count";
my $tl_incrs = 0;
sub tl_incr { Tokenlock::increment($tl_count, sync => $o{sync}); $tl_incrs++ }

my $fl_count = "$dir/fl.count";
my $fl_incrs = 0;
sub fl_incr {
    open(my $lk, '>>', "$fl_count.flock") or die "open $fl_count.flock: $!";
    flock($lk, LOCK_EX) or die "flock $fl_count.flock: $!";
    my $v = 0;
    if (open(my $in, '<', $fl_count)) {
        my $line = <$in>;
        $v = $1 if defined $line && $line =~ /\A(\d+)\n\z/;
        close $in;
    }
    my $tmp = "$fl_count.tmp.$$";
    sysopen(my $out, $tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644) or die "create $tmp: $!";
    syswrite($out, ($v + 1) . "\n") or die "write $tmp: $!";
    if ($o{sync} ne 'none') { $out->sync or die "fsync $tmp: $!" }
    close $out or die "close $tmp: $!";
    rename($tmp, $fl_count) or die "rename $tmp: $!";
    if ($o{sync} eq 'file_and_dir') {
        sysopen(my $d, $dir, O_RDONLY) or die "open $dir: $!";
        $d->sync or die "fsync $dir: $!";
        close $d;
    }
    close $lk;
    $fl_incrs++;
}

# --- timing --------------------------------------------------------------------------

sub per_call_us {
    my ($fn, $n) = @_;
    my $t = Time::HiRes::time();
    $fn->() for 1 .. $n;
    return (Time::HiRes::time() - $t) / $n * 1e6;
}

sub median {
    my @s = sort { $a <=> $b } @_;
    return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

my %fn = (tl_lock => \&tl_lock, rn_lock => \&rn_lock, fl_lock => \&fl_lock, tl_incr => \&tl_incr, fl_incr => \&fl_incr);
# One warm-up call each: the first creates the lock directory or file.
$_->() for values %fn;

my %t = map { $_ => [] } keys %fn;
my (@lock_rename_ratio, @lock_ratio, @incr_ratio);
for my $round (0 .. $o{rounds} - 1) {
    my %r;
    for my $group ([qw(tl_lock rn_lock fl_lock)], [qw(tl_incr fl_incr)]) {
        # Rotating which goes first keeps a drift of the machine's speed
        # within a round from favouring one side.
        my $shift = $round % @$group;
        for my $key (@$group[ $shift .. $#$group ], @$group[ 0 .. $shift - 1 ]) {
            $r{$key} = per_call_us($fn{$key}, $o{calls});
        }
    }
    push @{ $t{$_} }, $r{$_} for keys %r;
    push @lock_rename_ratio, $r{tl_lock} / $r{rn_lock};
    push @lock_ratio,        $r{tl_lock} / $r{fl_lock};
    push @incr_ratio,        $r{tl_incr} / $r{fl_incr};
}
die "perl_bench.pl: the rename lock $rn_file did not end released\n" unless -d $rn_file && !-e $rn_token;

# Both counters must hold exactly what was added, or the figures mean nothing.
for ([$tl_count, $tl_incrs], [$fl_count, $fl_incrs]) {
    my ($f, $n) = @$_;
    open(my $in, '<', $f) or die "perl_bench.pl: read $f: $!";
    my $v = <$in>;
    die "perl_bench.pl: $f holds $v after $n increments\n" unless defined $v && $v eq "$n\n";
}

my $lock_rename_ratio = median(@lock_rename_ratio);
my $lock_ratio = median(@lock_ratio);
my $incr_ratio = median(@incr_ratio);
printf "tokenlock command: %s\n", $cmd;
printf "directory: %s; %d calls per variant per round, %d rounds%s; increments with sync=%s\n",
  $dir, $o{calls}, $o{rounds}, $o{quick} ? ' (quick: not for figures)' : '', $o{sync};
printf "%-40s %12s\n", 'per call, median of rounds', 'us';
printf "%-40s %12.1f\n", 'with_lock around an empty block',    median(@{ $t{tl_lock} });
printf "%-40s %12.1f\n", 'two rename() calls',                 median(@{ $t{rn_lock} });
printf "%-40s %12.1f\n", 'open + flock(LOCK_EX) + close',      median(@{ $t{fl_lock} });
printf "%-40s %12.1f\n", 'increment()',                        median(@{ $t{tl_incr} });
printf "%-40s %12.1f\n", 'flock counter (read, write, rename)', median(@{ $t{fl_incr} });
printf "lock: with_lock / two renames = %.2fx (rounds: %s)\n", $lock_rename_ratio,
  join(' ', map { sprintf '%.2f', $_ } @lock_rename_ratio);
printf "lock: with_lock / flock = %.1fx (rounds: %s)\n", $lock_ratio, join(' ', map { sprintf '%.1f', $_ } @lock_ratio);
printf "incr: increment / flock = %.1fx (rounds: %s)\n", $incr_ratio, join(' ', map { sprintf '%.1f', $_ } @incr_ratio);
printf "perl_lock_rename_ratio=%.2f\n", $lock_rename_ratio;
printf "perl_lock_ratio=%.2f\n", $lock_ratio;
printf "perl_incr_ratio=%.2f\n", $incr_ratio;
