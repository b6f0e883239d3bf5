#!/usr/bin/perl
# A native Perl locker driven line by line on stdin (waiters.py):
#   hold   acquire LOCKDIR, print "A <monotonic ns>"; the next line releases
#          it, printing "R <monotonic ns>" just before the release
#   cycle  acquire, print "A ns" and "R ns", release
#   holder.pl LIBDIR LOCKDIR
use strict;
use warnings;
use Time::HiRes ();
my ($libdir, $lockdir) = @ARGV;
die "usage: holder.pl LIBDIR LOCKDIR\n" unless defined $lockdir;
unshift @INC, $libdir;
require Tokenlock;
$| = 1;
sub ns { sprintf('%.0f', Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) * 1e9) }
while (my $cmd = <STDIN>) {
    chomp $cmd;
    my $lock = Tokenlock->acquire($lockdir, wait => 30);
    print 'A ', ns(), "\n";
    <STDIN> if $cmd eq 'hold';
    print 'R ', ns(), "\n";
    $lock->release;
}
