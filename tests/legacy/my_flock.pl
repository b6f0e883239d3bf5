#!/usr/bin/perl
# The rename lock that many deployed CGI scripts copied (often named
# my_flock), written out as those scripts do it, to test that tokenlock
# shares a lock directory with them:
#   lock:     rename LOCKDIR/lockfile to LOCKDIR/lockfile<epoch seconds>
#   unlock:   rename it back
#   takeover: a lockfile<seconds> older than the timeout is renamed, by that
#             exact name, to a new lockfile<now>
# Usage:
#   my_flock.pl LOCKDIR TIMEOUT POLL incr FILE N   N locked read +1 write cycles
#   my_flock.pl LOCKDIR TIMEOUT POLL hold-and-die  lock, print the token, exit
#                                                  without unlocking (a crash)
#   my_flock.pl LOCKDIR TIMEOUT POLL try BUDGET    exit 0 if the lock was had
#                                                  within BUDGET seconds
#                                                  (released again), 2 if not
use strict;
use warnings;
use Time::HiRes ();

my ($dir, $timeout, $poll, $mode, @rest) = @ARGV;
die "usage: my_flock.pl LOCKDIR TIMEOUT POLL MODE ...\n" unless defined $mode;

sub my_flock {
  my ($budget) = @_;
  my $deadline = defined $budget ? Time::HiRes::time() + $budget : undef;
  while (1) {
    my $now = time;
    my $mine = "$dir/lockfile$now";
    return $mine if rename("$dir/lockfile", $mine);
    if (opendir(my $dh, $dir)) {
      for my $name (readdir $dh) {
        next unless $name =~ /^lockfile(\d+)$/;
        return $mine if $now - $1 > $timeout && rename("$dir/$name", $mine);
      }
      closedir $dh;
    }
    return undef if defined $deadline && Time::HiRes::time() >= $deadline;
    select(undef, undef, undef, $poll);
  }
}

sub my_unlock {
  my ($mine) = @_;
  rename($mine, "$dir/lockfile") or die "my_flock: unlock $mine: $!\n";
}

if ($mode eq 'incr') {
  my ($file, $n) = @rest;
  for (1 .. $n) {
    my $mine = my_flock();
    my $value = 0;
    if (open(my $in, '<', $file)) {
      my $line = <$in>;
      close $in;
      die "my_flock: $file holds \"" . ($line // '') . "\"\n"
        unless defined $line && $line =~ /^(\d+)\n\z/;
      $value = $1;
    }
    open(my $out, '>', $file) or die "my_flock: write $file: $!\n";
    print $out $value + 1, "\n";
    close $out or die "my_flock: close $file: $!\n";
    my_unlock($mine);
  }
} elsif ($mode eq 'hold-and-die') {
  my $mine = my_flock();
  $mine =~ s{.*/}{};
  print "$mine\n";
} elsif ($mode eq 'try') {
  my $mine = my_flock($rest[0]);
  exit 2 unless defined $mine;
  my_unlock($mine);
} else {
  die "my_flock: unknown mode $mode\n";
}
exit 0;
