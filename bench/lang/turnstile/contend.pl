#!/usr/bin/perl
# N processes on one lock, each doing lock, increment a counter file,
# release, for SECONDS: every waiting scheme of TurnstileLock.pm against
# flock(LOCK_EX) on a file, side by side in one run; the twin of
# contend.php (same options, same table, same checks).
#
#   perl contend.pl [-n PROCS] [-t SECONDS] [-r ROUNDS] [-s SCHEMES] [-w WAIT] [-c replace|inplace] [-d DIR]
#   perl contend.pl worker SCHEME LOCKDIR COUNTER SECONDS [CANARY]
#   perl contend.pl probe SCHEME LOCKDIR WAIT
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin, "$FindBin::Bin/../../../bindings/perl/lib";
use Fcntl qw(:flock O_RDWR O_CREAT O_EXCL O_WRONLY SEEK_SET);
use File::Temp qw(tempdir);
use Getopt::Std qw(getopts);
use POSIX qw(floor);
use TurnstileLock;

# The scheme `module`: the Perl module itself (bindings/perl/lib), whose
# waiters line up in its turnstile, in TurnstileLock's calls; `modulepoll`:
# the module told the filesystem is NFS, where its waiters poll.
package ModuleLock {
    sub new {
        my ($class, $dir, $poll) = @_;
        require Tokenlock;
        $Tokenlock::Turnstile::FS_TYPE{$dir} = 'nfs' if $poll;
        return bless { dir => $dir }, $class;
    }
    sub acquire {
        my ($self, $wait) = @_;
        $self->{lock} = eval { Tokenlock->acquire($self->{dir}, wait => defined $wait ? $wait : 'forever') };
        return $self->{lock} ? 1 : 0;
    }
    sub release { my ($self) = @_; (delete $self->{lock})->release }
}

# The counter of tests/support/lock_worker (20 digits and a newline), in
# place or replaced by a temporary file renamed over it, as in contend.php.
sub increment {
    my ($counter, $in_place, $fh) = @_;
    sysseek($fh, 0, SEEK_SET);
    sysread($fh, my $v, 21);
    my $line = sprintf "%020d\n", $v + 1;
    if ($in_place) {
        sysseek($fh, 0, SEEK_SET);
        syswrite($fh, $line);
        return;
    }
    my $tmp = "$counter.tmp.$$";
    open(my $out, '>', $tmp) or die "contend: $tmp: $!\n";
    print $out $line;
    close $out;
    rename($tmp, $counter) or die "contend: rename $tmp: $!\n";
}

# One process's loop from START to STOP (monotonic ns): [ops, latencies in ns].
sub loop {
    my ($scheme, $dir, $counter, $when, $opt, $canary) = @_;
    my ($start, $stop) = @$when;
    my ($fl, $lock, $fh, @lat);
    if ($scheme eq 'flock') { open($fl, '>>', "$dir.flock") or die "contend: $dir.flock: $!\n" }
    elsif ($scheme =~ /\Amodule(poll)?\z/) { $lock = ModuleLock->new($dir, $1) }
    else { $lock = TurnstileLock->new($dir, $scheme) }
    Time::HiRes::usleep(1000) while TurnstileLock::now_ns() < $start;
    while ((my $t0 = TurnstileLock::now_ns()) < $stop) {
        next unless $fl ? flock($fl, LOCK_EX) : $lock->acquire($opt->{wait});
        push @lat, TurnstileLock::now_ns() - $t0;
        if (defined $canary) {
            sysopen(my $c, $canary, O_WRONLY | O_CREAT | O_EXCL) or die "contend: two holders at once: $canary: $!\n";
            close $c;
        }
        sysopen($fh, $counter, O_RDWR) or die "contend: $counter: $!\n" unless $opt->{in_place} && $fh;
        increment($counter, $opt->{in_place}, $fh);
        undef $fh unless $opt->{in_place};
        unlink $canary if defined $canary;
        $fl ? flock($fl, LOCK_UN) : $lock->release;
    }
    return (scalar @lat, \@lat);
}

sub pct { my ($s, $p) = @_; return @$s ? $s->[ (floor($p / 100 * @$s) < $#$s ? floor($p / 100 * @$s) : $#$s) ] : 0 }

sub jain {
    my $sum = 0; my $sq = 0;
    for (@_) { $sum += $_; $sq += $_ * $_ }
    return $sq ? $sum * $sum / (@_ * $sq) : 0;
}

sub median { my @x = sort { $a <=> $b } @_; return $x[ int($#x / 2) ] }

# A fresh lock directory with its free token, and a zero counter.
sub fresh {
    my ($work, $name) = @_;
    my $dir = "$work/$name.lock";
    mkdir $dir, 0755 or die "contend: $dir: $!\n";
    mkdir "$dir/lockfile", 0755 or die "contend: $dir/lockfile: $!\n";
    open(my $c, '>', "$work/$name.count") or die "contend: $work/$name.count: $!\n";
    printf $c "%020d\n", 0;
    close $c;
    return ($dir, "$work/$name.count");
}

# One run of SCHEME with N processes: [ops/s, jain, p50 us, p99 us, max us, CPU us per operation].
sub run {
    my ($scheme, $n, $seconds, $opt, $work, $tag) = @_;
    my ($dir, $counter) = fresh($work, $tag);
    my $cpu = cpu_of_children();
    my $start = TurnstileLock::now_ns() + 200_000_000;
    my @pids;
    for my $i (0 .. $n - 1) {
        my $pid = fork // die "contend: fork: $!\n";
        if (!$pid) {
            my ($ops, $lat) = loop($scheme, $dir, $counter, [ $start, $start + int($seconds * 1e9) ], $opt);
            open(my $o, '>', "$work/$tag.$i") or die;
            print $o pack('Q*', $ops, @$lat);
            close $o;
            POSIX::_exit(0);
        }
        push @pids, $pid;
    }
    for (@pids) { waitpid($_, 0); die "contend: a $scheme worker failed ($?)\n" if $? }
    my $row = summarise($scheme, $n, $seconds, $work, $tag, $counter);
    push @$row, (cpu_of_children() - $cpu) / ($row->[0] * $seconds || 1);
    return $row;
}

# CPU time (user and system, microseconds) of the children waited for so far.
sub cpu_of_children { my (undef, undef, $cu, $cs) = times; return ($cu + $cs) * 1e6 }

# Reads the workers' figures and checks that no increment was lost.
sub summarise {
    my ($scheme, $n, $seconds, $work, $tag, $counter) = @_;
    my (@counts, @all);
    for my $i (0 .. $n - 1) {
        open(my $in, '<', "$work/$tag.$i") or die;
        local $/;
        my ($ops, @lat) = unpack 'Q*', <$in>;
        push @counts, $ops;
        push @all, @lat;
    }
    my $total = 0; $total += $_ for @counts;
    open(my $c, '<', $counter) or die; my $got = <$c> + 0;
    die "contend: $scheme: $total operations but the counter holds $got: two holders at once\n" if $got != $total;
    @all = sort { $a <=> $b } @all;
    return [ $total / $seconds, jain(@counts), pct(\@all, 50) / 1e3, pct(\@all, 99) / 1e3, (@all ? $all[-1] : 0) / 1e3 ];
}

sub report {
    my ($results, @schemes) = @_;
    printf "%-14s %8s %6s %8s %8s %8s %7s %8s %s\n", 'scheme', 'ops/s', 'jain', 'p50 us', 'p99 us', 'max us', 'cpu/op', 'x flock', '(min-max)';
    for my $s (@schemes) {
        my @rows = @{ $results->{$s} };
        my @ratios = map { $rows[$_][0] / $results->{flock}[$_][0] } 0 .. $#rows;
        my @r = sort { $a <=> $b } @ratios;
        printf "%-14s %8.0f %6.2f %8.0f %8.0f %8.0f %7.0f %7.2fx (%.2f-%.2f)\n", $s,
            (map { my $k = $_; median(map { $_->[$k] } @rows) } 0 .. 5), median(@ratios), $r[0], $r[-1];
    }
}

sub worker {
    my ($scheme, $dir, $counter, $seconds, $canary) = @_;
    my $now = TurnstileLock::now_ns();
    my ($ops, $lat) = loop($scheme, $dir, $counter, [ $now, $now + int($seconds * 1e9) ], { wait => 30, in_place => 1 }, $canary);
    my @s = sort { $a <=> $b } @$lat;
    printf "ops %d p50_us %.0f p99_us %.0f max_us %.0f\n", $ops, pct(\@s, 50) / 1e3, pct(\@s, 99) / 1e3, (@s ? $s[-1] : 0) / 1e3;
}

# One acquisition with a budget, for the attacks, as in contend.php.
sub probe {
    my ($scheme, $dir, $wait) = @_;
    my $lock = TurnstileLock->new($dir, $scheme);
    my $t0 = TurnstileLock::now_ns();
    my $got = $lock->acquire($wait);
    printf "%s %.0f at %.0f%s\n", $got ? 'got' : 'timed_out', (TurnstileLock::now_ns() - $t0) / 1e6, Time::HiRes::time() * 1e3,
        $lock->{fallback} eq '' ? '' : " fallback: $lock->{fallback}";
    $lock->release if $got;
}

sub main {
    if (@ARGV && $ARGV[0] eq 'worker') { shift @ARGV; worker(@ARGV); return 0 }
    if (@ARGV && $ARGV[0] eq 'probe') { shift @ARGV; probe(@ARGV); return 0 }
    my %o;
    getopts('n:t:r:s:w:d:c:', \%o) or die "usage: see the head of $0\n";
    my ($n, $seconds, $rounds) = ($o{n} // 8, $o{t} // 2, $o{r} // 3);
    my @schemes = split /,/, $o{s} // 'flock,poll,block,nb,fair,deputy,aged';
    unshift @schemes, 'flock' unless grep { $_ eq 'flock' } @schemes;  # every ratio is to flock's run in the same round
    my $opt = { wait => $o{w}, in_place => ($o{c} // 'replace') eq 'inplace' };
    my $work = tempdir('contend.XXXXXX', DIR => $o{d} // '/tmp', CLEANUP => 1);
    printf "perl %vd, %d processes, %.1f s per run, %d rounds, wait %s, counter %s\n", $^V, $n, $seconds, $rounds,
        defined $o{w} ? "$o{w} s" : 'none', $opt->{in_place} ? 'in place' : 'replaced';
    my %results;
    for my $r (0 .. $rounds - 1) {
        my $k = $r % @schemes;
        for my $s (@schemes[ $k .. $#schemes ], @schemes[ 0 .. $k - 1 ]) {
            (my $tag = "r$r-$s") =~ s{[@/]}{_}g;
            $results{$s}[$r] = run($s, $n, $seconds, $opt, $work, $tag);
        }
    }
    report(\%results, @schemes);
    return 0;
}

exit main();
