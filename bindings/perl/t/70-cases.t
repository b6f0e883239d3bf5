#!/usr/bin/perl
# The shared table of error cases (tests/bindings/cases): the PHP and
# Python suites run the same table, so the three modules agree on the name
# of every error.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use POSIX ();
use Test::More;
use TokenlockTest;

use Tokenlock qw(increment read_counter);

tokenlock_command();
my $dir = scratch_dir();
my @held_tokens = (
    'lockfile.4102444800000000.h-0000abcd.1.1.0000000000000001',
    'lockfile.4102444800000000.h-0000abcd.1.1.0000000000000002',
);

sub read_cases {
    my $path = TokenlockTest::repo_dir() . '/tests/bindings/cases';
    open my $fh, '<', $path or die "cannot read $path: $!";
    my @cases;
    while (my $line = <$fh>) {
        $line =~ s/\A\s+|\s+\z//g;
        next if $line eq '' || $line =~ /\A#/;
        my @f = split ' ', $line;
        die "$path:$.: not NAME SET-UP OPERATION EXPECTED: $line" unless @f == 4;
        push @cases, \@f;
    }
    return @cases;
}

sub set_up {
    my ($c, $what) = @_;
    my ($L, $C) = @$c{qw(lock counter)};
    return if $what eq '-';
    if ($what eq 'held') {
        $c->{handle} = Tokenlock->acquire($L, wait => 0);
    }
    elsif ($what eq 'taken_over') {
        $c->{handle} = Tokenlock->acquire($L, wait => 0);
        rename("$L/" . $c->{handle}->token, "$L/lockfile") or die "rename: $!";
    }
    elsif ($what eq 'released') {
        $c->{handle} = Tokenlock->acquire($L, wait => 0);
        $c->{handle}->release;
    }
    elsif ($what =~ /\Acounter=(.*)\z/) {
        spit($C, "$1\n");
    }
    elsif ($what eq 'world_writable') {
        mkdir $L or die $!;
        mkdir "$L/lockfile" or die $!;
        chmod 0777, $L or die $!;
    }
    elsif ($what eq 'no_token') {
        mkdir $L or die $!;
        spit("$L/stray", '');
    }
    elsif ($what eq 'two_tokens') {
        mkdir $L or die $!;
        mkdir "$L/$_" or die $! for @held_tokens;
    }
    else { die "unknown set-up $what" }
}

# The value the operation returned (undef for none); dies as the module does.
sub operate {
    my ($c, $what) = @_;
    my ($L, $C) = @$c{qw(lock counter)};
    if    ($what eq 'try_lock')     { Tokenlock->acquire($L, wait => 0)->release }
    elsif ($what eq 'wait_lock')    { Tokenlock->acquire($L, wait => 0.2)->release }
    elsif ($what eq 'lock_lease_0') { Tokenlock->acquire($L, wait => 0, lease => 0)->release }
    elsif ($what eq 'release')      { $c->{handle}->release }
    elsif ($what eq 'refresh')      { $c->{handle}->refresh }
    elsif ($what eq 'increment')    { return increment($C, wait => 0) }
    elsif ($what eq 'read_counter') { return read_counter($C) }
    else                            { die "unknown operation $what" }
    return undef;
}

my %errno_name;
for my $sym (qw(EOVERFLOW ENOENT EACCES EISDIR ENOSPC EIO)) {
    $errno_name{ POSIX->can($sym)->() } = $sym;
}

sub outcome {
    my ($c, $operation) = @_;
    my $value;
    return defined $value ? "value:$value" : 'value:none' if eval { $value = operate($c, $operation); 1 };
    my $err = $@;
    return "not a Tokenlock::Error: $err" unless ref $err && $err->isa('Tokenlock::Error');
    return 'system:' . ($errno_name{ $err->errno } || $err->errno) if $err->code eq 'system';
    return $err->code;
}

# The counter's contents (undef when missing) and the entries of L.
sub snapshot {
    my ($c) = @_;
    my $counter = slurp($c->{counter});
    my @entries;
    if (opendir my $lh, $c->{lock}) { @entries = sort grep { !/\A\.\.?\z/ } readdir $lh }
    return join("\n", defined $counter ? "C=$counter" : 'no C', '--', @entries);
}

my @cases = read_cases();
my %names = map { $_->[0] => 1 } @cases;
for my $needed (qw(busy timed_out lock_lost not_owner corrupt_data overflow untrusted
                   bad_argument missing_counter token_missing lock_corrupt)) {
    ok($names{$needed}, "the table has the case $needed");
}

for my $case (@cases) {
    my ($name, $set_up, $operation, $expected) = @$case;
    my $d = "$dir/$name";
    mkdir $d or die $!;
    my $c = { dir => $d, lock => "$d/L", counter => "$d/C" };
    set_up($c, $set_up);
    my $before = snapshot($c);
    my $got = outcome($c, $operation);
    is($got, $expected, "$name: $set_up, $operation: $expected");
    is(snapshot($c), $before, "$name: the failure changed nothing") unless $got =~ /\Avalue:/;
    eval { $c->{handle}->release if $c->{handle} && $c->{handle}->held; 1 };
    chmod 0755, $c->{lock} if -d $c->{lock};
}

done_testing();
