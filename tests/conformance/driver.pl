#!/usr/bin/perl
# The conformance driver of the Perl module (bindings/perl/lib, Tokenlock.pm):
# the line protocol of tests/conformance/README.md on stdin and stdout.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../bindings/perl/lib";
use Scalar::Util qw(blessed);
use Tokenlock;

$| = 1;
my $handle;

sub secs { return $_[0] / 1000 }

sub holder {
    my ($lockdir) = @_;
    my $h = Tokenlock::holder($lockdir);
    return 'ok free' unless $h;
    return 'ok ' . join(',', $h->{owner}, ($h->{stale} ? 'stale' : ()), ($h->{legacy} ? 'legacy' : ()));
}

# One word per holder, sorted: exclusive, shared, slot/N, waiting.
sub holders {
    my ($lockdir) = @_;
    # A stale entry of a group is no holder (the library lists live ones).
    my @words = sort map {
        $_->{waiting_writer} ? 'waiting' : $_->{mode} eq 'exclusive' ? 'exclusive' : $_->{slots} ? "slot/$_->{slots}" : 'shared'
    } grep { !($_->{stale} && $_->{token} =~ /\As\./) } Tokenlock::holders($lockdir);
    return @words ? 'ok ' . join(',', @words) : 'ok free';
}

# The module commits only inside update_file and increment, fenced; a
# shared hold is refused before anything is written, as the library does.
sub commit {
    Tokenlock::Update::_refuse_shared($handle) if $handle;
    return 'unsupported commit: the module has no commit under a held lock (its update and increment commit fenced)';
}

sub counted {
    my ($value) = @_;
    return defined $value ? "ok $value" : 'ok none';
}

sub update {
    my ($path, $text, $pause) = @_;
    Tokenlock::update_file($path, sub {
        if ($pause) {
            # The conformance runner moves the lock while we hold still.
            print "paused\n";
            my $go = <STDIN>;
            die "expected go\n" unless defined $go && $go =~ /\Ago\s*\z/;
        }
        return $text;
    }, wait => 0);
    return 'ok';
}

my %operations = (
    ping      => sub { return 'ok' },
    acquire => sub {
        my ($lockdir, $wait, $lease, $mode) = @_;
        my @mode = !defined $mode ? () : $mode eq 'shared' ? (shared => 1)
          : $mode =~ /\Aslots=(.*)\z/s ? (slots => $1) : return "unsupported acquire mode $mode";
        $handle = Tokenlock->acquire($lockdir, wait => secs($wait), lease => secs($lease), @mode);
        return 'ok';
    },
    commit => \&commit,
    holders => \&holders,
    release   => sub { $handle->release; return 'ok' },
    refresh   => sub { $handle->refresh(lease => secs($_[0])); return 'ok' },
    update    => \&update,
    increment => sub { return counted(Tokenlock::increment($_[0], wait => secs($_[1]))) },
    read      => sub { return counted(Tokenlock::read_counter($_[0])) },
    write     => sub { Tokenlock::write_file($_[0], $_[1]); return 'ok' },
    holder    => \&holder,
);

sub answer {
    my ($op, @args) = @_;
    my $code = $operations{$op};
    return "unsupported $op: not in the Perl module's API" unless $code;
    my $result = eval { $code->(@args) };
    return $result if defined $result;
    my $err = $@;
    die $err unless blessed($err) && $err->isa('Tokenlock::Error');
    return $err->code eq 'system' ? 'error system ' . $err->errno : 'error ' . $err->code;
}

while (my $line = <STDIN>) {
    my @words = split ' ', $line;
    last if !@words || $words[0] eq 'quit';
    print answer(@words), "\n";
}
