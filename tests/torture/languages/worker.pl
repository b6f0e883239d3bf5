#!/usr/bin/perl
# One torture worker in Perl: increments COUNTER with the native module
# until STOPFILE exists, logging each step to LOG (see torture.py, Logs).
#   worker.pl LIBDIR COUNTER STOPFILE LOG
use strict;
use warnings;
use Fcntl qw(O_WRONLY O_APPEND O_CREAT);
use Time::HiRes ();

my ($libdir, $counter, $stop, $logpath) = @ARGV;
die "usage: worker.pl LIBDIR COUNTER STOPFILE LOG\n" unless defined $logpath;
unshift @INC, $libdir;
require Tokenlock;

sysopen(my $log, $logpath, O_WRONLY | O_APPEND | O_CREAT, 0644) or die "worker.pl: open $logpath: $!\n";
# One syswrite per line: with O_APPEND the line is in the file before the
# next step starts, whatever signal comes next.
sub note { my $line = sprintf("%s %.6f\n", $_[0], Time::HiRes::time()); syswrite($log, $line) == length($line) or die "worker.pl: write $logpath: $!\n" }

until (-e $stop) {
    note('i');
    my $v = eval { Tokenlock::increment($counter, wait => 60) };
    if (defined $v) { note("d $v") ; next }
    my $code = ref $@ ? $@->code : 'perl';
    note($code eq 'lock_lost' ? 'l' : "e $code");
    print STDERR "worker.pl: ", (ref $@ ? $@->message : $@), "\n";
}
