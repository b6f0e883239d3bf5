#!/usr/bin/perl
# One worker of the shared torture in Perl (shared.py has the log format and
# the checks): until STOPFILE exists, takes COUNTER.lock shared and reads
# the counter, or exclusively and increments it through the held token, or
# one of SLOTS slots of SEMDIR, each hold logged to the shared event LOG.
#   shared_worker.pl LIBDIR COUNTER SEMDIR SLOTS LEASE STOPFILE LOG SEED KINDS
# KINDS: the kinds of hold it chooses among, of r (reader), s (slot), w (writer).
use strict;
use warnings;
use Fcntl qw(O_WRONLY O_APPEND O_CREAT);
use Time::HiRes ();

my ($libdir, $counter, $semdir, $slots, $lease, $stop, $logpath, $seed, $kinds) = @ARGV;
die "usage: shared_worker.pl LIBDIR COUNTER SEMDIR SLOTS LEASE STOPFILE LOG SEED KINDS\n" unless defined $kinds;
unshift @INC, $libdir;
require Tokenlock;
srand($seed);

sysopen(my $log, $logpath, O_WRONLY | O_APPEND | O_CREAT, 0644) or die "shared_worker.pl: open $logpath: $!\n";
my $hold = 0;
# One syswrite per line: with O_APPEND the line is whole in the shared log
# before the next step, whatever signal comes next.
sub note {
    my $line = sprintf("perl %d %d %s %.6f\n", $$, $hold, $_[0], Time::HiRes::time());
    syswrite($log, $line) == length($line) or die "shared_worker.pl: write $logpath: $!\n";
}

# The counter as read inside a hold: "r V", or "r torn:HEX".
sub read_note {
    my $text = '';
    if (open(my $in, '<', $counter)) { local $/; $text = <$in> // ''; close $in }
    return "r $1" if $text =~ /\A(0|[1-9][0-9]*)\n\z/;
    return 'r torn:' . unpack('H*', $text);
}

# Commits V through the held token with the command (`tokenlock commit`,
# fenced: exit 3 once the lock was taken over). Returns its exit status.
sub commit_through {
    my ($lock, $v) = @_;
    open(my $to, '|-', $ENV{TOKENLOCK_COMMAND}, 'commit', '--sync', 'none', $lock->lockdir, $lock->token, $counter)
      or die "shared_worker.pl: run $ENV{TOKENLOCK_COMMAND} commit: $!\n";
    print $to "$v\n";
    close $to;
    return $? >> 8;
}

sub hold_once {
    my ($kind) = @_;
    my %opt = (wait => 60, lease => $lease);
    $opt{slots} = $slots if $kind eq 's';
    $opt{shared} = 1 if $kind eq 'r';
    my $lock = Tokenlock->acquire($kind eq 's' ? $semdir : "$counter.lock", %opt);
    note("+ $kind");
    my $lost = 0;
    if ($kind eq 'r') {
        note(read_note());
    } elsif ($kind eq 'w') {
        my $old = read_note();
        if ($old =~ /^r torn:/) { note($old); $lock->release; note('ok'); return }   # a failure of the run
        my $v = substr($old, 2) + 1;
        note("c $v");
        if (int(rand(16)) == 0) {
            note('s');      # shared.py continues it past the lease: the commit must then be refused
            kill 'STOP', $$;
        }
        my $rc = commit_through($lock, $v);
        $lost = $rc == 3;
        note($rc == 0 ? "W $v" : $lost ? 'l' : "e commit/$rc");
    }
    # A hold of some length, for overlaps to check; one in ten long enough
    # for shared.py to stop it inside past its lease.
    Time::HiRes::sleep($kind ne 'w' && int(rand(10)) == 0 ? 0.2 + rand(0.2) : rand($kind eq 'w' ? 0.005 : 0.03));
    note('-');
    if (eval { $lock->release; 1 }) { note($lost ? 'l' : 'ok'); return }
    die $@ unless ref $@ && $@->code eq 'lock_lost';
    note('l');
    print STDERR "shared_worker.pl: ", $@->message, "\n";    # names the token, for shared.py's reader
}

until (-e $stop) {
    $hold++;
    my $r = int(rand(100));
    my $kind = $r < 45 ? 'r' : $r < 75 ? 's' : 'w';
    next if eval { hold_once(index($kinds, $kind) >= 0 ? $kind : 'r'); 1 };
    note('e ' . (ref $@ ? $@->code : 'perl'));
    print STDERR "shared_worker.pl: ", (ref $@ ? $@->message : $@), "\n";
}
