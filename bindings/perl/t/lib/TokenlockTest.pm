package TokenlockTest;

# What the tests share: finding the command, running programs without a
# shell, forked workers that report through pipes, and looks at a lock
# directory that do not go through the module under test.

use strict;
use warnings;

use Exporter 'import';
use File::Path ();
use File::Spec ();
use File::Temp ();
use FindBin ();
use JSON::PP ();
use POSIX ();
use Test::More ();

our @EXPORT = qw(
  tokenlock_command scratch_dir capture fork_worker reap read_line
  lock_status token_re leftovers entries slurp spit
);

my $REPO = File::Spec->rel2abs("$FindBin::Bin/../../..");

# The command under test: TOKENLOCK_COMMAND, else the build tree's. Every
# test file needs it: without a build the file is skipped, saying why, but a
# TOKENLOCK_COMMAND that names nothing usable is a mistake, and stops the run.
sub tokenlock_command {
    my $cmd = $ENV{TOKENLOCK_COMMAND};
    if (defined $cmd && length $cmd) {
        Test::More::BAIL_OUT("TOKENLOCK_COMMAND=$cmd is not an executable file") unless -f $cmd && -x _;
    }
    else {
        $cmd = "$REPO/build/tools/tokenlock";
        Test::More::plan(skip_all => "no tokenlock command at $cmd: build it, or set TOKENLOCK_COMMAND")
          unless -f $cmd && -x _;
    }
    $ENV{TOKENLOCK_COMMAND} = File::Spec->rel2abs($cmd);
    return $ENV{TOKENLOCK_COMMAND};
}

sub repo_dir { $REPO }

# A private directory: not sticky (unlike /tmp itself), which lock
# directories need.
sub scratch_dir {
    return File::Temp::tempdir('tokenlock-perl-XXXXXX', TMPDIR => 1, CLEANUP => 1);
}

# Runs argv without a shell and returns (exit status as in $?, stdout,
# stderr). %o: env => { NAME => value or undef to remove }, stdin => bytes.
sub capture {
    my ($argv, %o) = @_;
    my $dir = File::Temp::tempdir('tokenlock-perl-run-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my ($in, $out, $err) = map { "$dir/$_" } qw(in out err);
    spit($in, defined $o{stdin} ? $o{stdin} : '');
    my $pid = fork;
    die "capture: cannot fork: $!" unless defined $pid;
    if ($pid == 0) {
        while (my ($k, $v) = each %{ $o{env} || {} }) {
            if (defined $v) { $ENV{$k} = $v } else { delete $ENV{$k} }
        }
        open STDIN,  '<', $in  or POSIX::_exit(120);
        open STDOUT, '>', $out or POSIX::_exit(121);
        open STDERR, '>', $err or POSIX::_exit(122);
        { no warnings 'exec'; exec { $argv->[0] } @$argv; }
        print STDERR "capture: cannot run $argv->[0]: $!\n";
        POSIX::_exit(123);
    }
    waitpid($pid, 0);
    my $status = $?;
    my @r = ($status, slurp($out), slurp($err));
    # Removed now: forked workers that capture end without END blocks.
    File::Path::rmtree($dir);
    return @r;
}

# Runs $code in a child process, which ends with status 0, or 1 after
# printing what it died of. The child never returns into the test and never
# runs the test's END blocks.
sub fork_worker {
    my ($code) = @_;
    my $pid = fork;
    die "fork_worker: cannot fork: $!" unless defined $pid;
    return $pid if $pid;
    my $ok = eval { $code->(); 1 };
    print STDERR "worker $$: $@" unless $ok;
    POSIX::_exit($ok ? 0 : 1);
}

sub reap {
    my ($pid) = @_;
    waitpid($pid, 0);
    return $?;
}

# One line from a pipe, without the newline; undef at end of file.
sub read_line {
    my ($fh) = @_;
    my $line = <$fh>;
    chomp $line if defined $line;
    return $line;
}

# The lock's state as `tokenlock status --json` reports it.
sub lock_status {
    my ($lockdir) = @_;
    my ($st, $out, $err) = capture([$ENV{TOKENLOCK_COMMAND}, 'status', '--json', $lockdir]);
    die "tokenlock status $lockdir failed ($st): $err" if $st;
    return JSON::PP::decode_json($out);
}

# The token grammar of docs/protocol.md.
sub token_re {
    return qr/\Alockfile\.[1-9][0-9]{0,18}\.[A-Za-z0-9_-]{1,32}-[0-9a-f]{8}\.([1-9][0-9]*)\.[0-9]{1,20}\.[0-9a-f]{16}\z/;
}

# Temporary files of atomic writes of $name left in $dir.
sub leftovers {
    my ($dir, $name) = @_;
    opendir(my $dh, $dir) or die "leftovers: cannot list $dir: $!";
    my @left = grep { /\A\Q.$name.tmp.\E/ } readdir $dh;
    closedir $dh;
    return @left;
}

# The names in directory $d, sorted; none when it cannot be listed.
sub entries {
    my ($d) = @_;
    opendir(my $dh, $d) or return ();
    my @e = sort grep { $_ ne '.' && $_ ne '..' } readdir $dh;
    closedir $dh;
    return @e;
}

sub slurp {
    my ($path) = @_;
    open(my $fh, '<', $path) or return undef;
    binmode $fh;
    local $/;
    my $s = <$fh>;
    return defined $s ? $s : '';
}

sub spit {
    my ($path, $data) = @_;
    open(my $fh, '>', $path) or die "spit: cannot write $path: $!";
    binmode $fh;
    print {$fh} $data;
    close $fh or die "spit: cannot close $path: $!";
}

1;
