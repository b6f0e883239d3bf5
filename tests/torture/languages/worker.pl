#!/usr/bin/perl
# One torture worker in Perl, on the native module, until STOPFILE exists,
# logging each step to LOG (see torture.py, Logs):
#   worker.pl LIBDIR COUNTER STOPFILE LOG incr
#     increments COUNTER with increment()
#   worker.pl LIBDIR COUNTER STOPFILE LOG lock MARKDIR TMPDIR
#     holds COUNTER.lock with acquire() (its default lease of an hour: no
#     live holder is ever taken over here) and increments COUNTER itself,
#     by a temporary file in TMPDIR (COUNTER's filesystem) renamed over it.
#     Inside, it claims the marker MARKDIR/holder (local disk, out of reach
#     of client caches) with O_EXCL: finding it held by another live
#     process means two live holders at once, logged "x PID". A marker of a
#     process that is gone was left by a holder killed with -9: taken.
use strict;
use warnings;
use Errno qw(EEXIST);
use Fcntl qw(O_WRONLY O_APPEND O_CREAT O_EXCL);
use Time::HiRes ();

my ($libdir, $counter, $stop, $logpath, $mode, $markdir, $tmpdir) = @ARGV;
die "usage: worker.pl LIBDIR COUNTER STOPFILE LOG incr|lock [MARKDIR TMPDIR]\n"
  unless defined $mode && ($mode eq 'incr' || defined $tmpdir);
unshift @INC, $libdir;
require Tokenlock;

sysopen(my $log, $logpath, O_WRONLY | O_APPEND | O_CREAT, 0644) or die "worker.pl: open $logpath: $!\n";
# One syswrite per line: with O_APPEND the line is in the file before the
# next step starts, whatever signal comes next.
sub note { my $line = sprintf("%s %.6f\n", $_[0], Time::HiRes::time()); syswrite($log, $line) == length($line) or die "worker.pl: write $logpath: $!\n" }

sub claim_marker {
    my $marker = "$markdir/holder";
    for (1 .. 100) {
        if (sysopen(my $fh, $marker, O_WRONLY | O_CREAT | O_EXCL, 0644)) {
            syswrite($fh, "$$\n");
            close $fh;
            return 1;
        }
        die "worker.pl: create $marker: $!\n" unless $! == EEXIST;
        open(my $in, '<', $marker) or next;
        my $pid = <$in> // '';
        close $in;
        chomp $pid;
        next unless $pid =~ /^\d+$/;    # being written: look again
        if ($pid != $$ && kill(0, $pid)) { note("x $pid"); return 0 }
        unlink $marker;
    }
    die "worker.pl: $marker never became free\n";
}

sub locked_increment {
    my $lock = Tokenlock->acquire("$counter.lock", wait => 60);
    claim_marker() or return;
    open(my $in, '<', $counter) or die "worker.pl: read $counter: $!\n";
    my $text = do { local $/; <$in> };
    close $in;
    die "worker.pl: $counter holds \"$text\"\n" unless $text =~ /\A(\d+)\n\z/;
    my $v = $1 + 1;
    my $tmp = "$tmpdir/count.$$";
    open(my $out, '>', $tmp) or die "worker.pl: write $tmp: $!\n";
    print $out "$v\n";
    close $out or die "worker.pl: close $tmp: $!\n";
    rename($tmp, $counter) or die "worker.pl: rename $tmp over $counter: $!\n";
    note("d $v");
    unlink "$markdir/holder";
    $lock->release;
}

until (-e $stop) {
    note('i');
    if ($mode eq 'lock') { locked_increment(); next }
    my $v = eval { Tokenlock::increment($counter, wait => 60) };
    if (defined $v) { note("d $v") ; next }
    my $code = ref $@ ? $@->code : 'perl';
    note($code eq 'lock_lost' ? 'l' : "e $code");
    print STDERR "worker.pl: ", (ref $@ ? $@->message : $@), "\n";
}
