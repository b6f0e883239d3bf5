package TokenlockTest;

# What the tests share: finding the command, running programs without a
# shell, forked workers that report through pipes, and looks at a lock
# directory that do not go through the module under test.

use strict;
use warnings;

use Cwd ();
use Exporter 'import';
use File::Copy ();
use File::Path ();
use File::Spec ();
use File::Temp ();
use FindBin ();
use JSON::PP ();
use POSIX ();
use Test::More ();

our @EXPORT = qw(
  tokenlock_command command_skip skip_all_without_command dir_status break_token free_now scratch_dir capture fork_worker reap read_line
  lock_status token_re leftovers temps entries slurp spit module_files copy_module until_true redis_server
);

# The source tree's root, when the tests run there.
my $REPO = Cwd::realpath("$FindBin::Bin/../../..") || File::Spec->rel2abs("$FindBin::Bin/../../..");

# The command under test: TOKENLOCK_COMMAND, else the build tree's, else
# none. The module is native, so a test file runs without it; only the
# parts that compare with the command or go through it (Tokenlock::Redis,
# the command option) are skipped, saying why (command_skip). A
# TOKENLOCK_COMMAND that names nothing usable is a mistake, and stops the run.
my $COMMAND;
sub tokenlock_command {
    my $cmd = $ENV{TOKENLOCK_COMMAND};
    if (defined $cmd && length $cmd) {
        Test::More::BAIL_OUT("TOKENLOCK_COMMAND=$cmd is not an executable file") unless -f $cmd && -x _;
    }
    else {
        $cmd = "$REPO/build/tools/tokenlock";
        if (!-f $cmd || !-x _) {
            delete $ENV{TOKENLOCK_COMMAND};
            return $COMMAND = undef;
        }
    }
    $ENV{TOKENLOCK_COMMAND} = File::Spec->rel2abs($cmd);
    return $COMMAND = $ENV{TOKENLOCK_COMMAND};
}

# Why a part is skipped without the command: returned for skip(), and
# printed, since a harness shows a whole file's skip but not a part's.
sub command_skip {
    my ($what) = @_;
    my $why = "$what needs the tokenlock command: TOKENLOCK_COMMAND is unset and none is built at $REPO/build/tools/tokenlock";
    Test::More::diag("skipped: $why");
    return $why;
}

# The same for a whole file.
sub skip_all_without_command {
    my ($what) = @_;
    return if defined $COMMAND;
    Test::More::plan(skip_all => "$what needs the tokenlock command: TOKENLOCK_COMMAND is unset and none is built at $REPO/build/tools/tokenlock");
}

sub repo_dir { $REPO }

# The module under test: the directory holding Tokenlock.pm and its parts.
my $MODULE_LIB = Cwd::realpath("$FindBin::Bin/../lib") || File::Spec->rel2abs("$FindBin::Bin/../lib");
$MODULE_LIB = "$REPO/bindings/perl/lib" unless -f "$MODULE_LIB/Tokenlock.pm";

# The module's files, relative to that directory: Tokenlock.pm and the
# parts under Tokenlock/, all of which a host copies.
sub module_files {
    opendir(my $dh, "$MODULE_LIB/Tokenlock") or die "module_files: cannot list $MODULE_LIB/Tokenlock: $!";
    my @parts = sort grep { /\.pm\z/ } readdir $dh;
    closedir $dh;
    return ('Tokenlock.pm', map { "Tokenlock/$_" } @parts);
}

# Copies the module into directory $to, as a host installs it beside a
# script: Tokenlock.pm and its directory Tokenlock/.
sub copy_module {
    my ($to) = @_;
    for my $f (module_files()) {
        (my $d = "$to/$f") =~ s{/[^/]*\z}{};
        File::Path::mkpath($d);
        File::Copy::copy("$MODULE_LIB/$f", "$to/$f") or die "copy_module: cannot copy $MODULE_LIB/$f to $to: $!";
    }
}

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

# Waits until $cond returns true, at most $secs seconds, looking every
# 2 ms; whether it did.
sub until_true {
    my ($cond, $secs) = @_;
    require Time::HiRes;
    my $end = Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) + $secs;
    until ($cond->()) {
        return 0 if Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) > $end;
        select(undef, undef, undef, 0.002);
    }
    return 1;
}

# One line from a pipe, without the newline; undef at end of file.
sub read_line {
    my ($fh) = @_;
    my $line = <$fh>;
    chomp $line if defined $line;
    return $line;
}

# The lock's state as `tokenlock status --json` reports it, or without the
# command as its directory shows it (dir_status).
sub lock_status {
    my ($lockdir) = @_;
    return dir_status($lockdir) unless defined $COMMAND;
    my ($st, $out, $err) = capture([$COMMAND, 'status', '--json', $lockdir]);
    die "tokenlock status $lockdir failed ($st): $err" if $st;
    return JSON::PP::decode_json($out);
}

# The fields of `tokenlock status --json` that the tests read, from the
# token's name (docs/protocol.md) and /proc, not through the module.
sub dir_status {
    my ($lockdir) = @_;
    my @names = entries($lockdir);
    my @held = grep { /\Alockfile./s } @names;
    return { state => 'free' } if !@held && (grep { $_ eq 'lockfile' } @names) || !@names;
    die "dir_status $lockdir: not one token but (@names)" unless @held == 1;
    my $t = $held[0];
    my ($exp, $pid, $start) = $t =~ /\Alockfile\.([1-9][0-9]*)\.[A-Za-z0-9_-]+-[0-9a-f]{8}\.([1-9][0-9]*)\.([0-9]+)\.[0-9a-f]{16}\z/
      or die "dir_status $lockdir: $t is not a token of docs/protocol.md";
    my $stat = slurp("/proc/$pid/stat");
    my $now_start = defined $stat && $stat =~ /\) (.*)\z/s ? (split ' ', $1)[19] : undef;
    my $alive = defined $now_start && ($start == 0 || $now_start eq $start);
    return { state => 'held', token => $t, pid => $pid + 0, expires_us => $exp + 0, owner => $alive ? 'alive' : 'dead' };
}

# Frees the lock held by $token as `tokenlock break --force` does, or with
# the protocol's own rename when there is no command. Returns (ok, error).
sub break_token {
    my ($lockdir, $token) = @_;
    return (rename("$lockdir/$token", "$lockdir/lockfile") ? 1 : 0, "rename $token: $!") unless defined $COMMAND;
    my ($st, undef, $err) = capture([$COMMAND, 'break', '--force', $lockdir, $token]);
    return ($st == 0 ? 1 : 0, $err);
}

# Whether a second process gets the lock at once (the command's `run -n`,
# or a forked native try_acquire without the command).
sub free_now {
    my ($lockdir, %env) = @_;
    if (defined $COMMAND) {
        my ($st) = capture([$COMMAND, 'run', '-n', $lockdir, 'true'], env => \%env);
        return $st == 0;
    }
    my $pid = fork_worker(sub {
        require Tokenlock;
        @ENV{ keys %env } = values %env;
        my $l = Tokenlock->try_acquire($lockdir) or POSIX::_exit(1);
        $l->release;
    });
    return reap($pid) == 0;
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

# Temporary files anywhere under $d (the target's directory and every
# lock workspace in it).
sub temps {
    my ($d) = @_;
    my @found;
    for my $e (entries($d)) {
        my $p = "$d/$e";
        push @found, $p if $e =~ /\.tmp\./;
        push @found, temps($p) if -d $p && !-l $p;
    }
    return @found;
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


# A redis-server of the test's own on a Unix socket in $dir, stopped by its
# pid when the test file ends; its URL. The whole file is skipped, saying
# why, when redis-server is not installed or the command was built
# without Redis.
my ($REDIS_PID, $REDIS_PARENT);
END { if ($REDIS_PID && $$ == $REDIS_PARENT) { kill 'TERM', $REDIS_PID; waitpid($REDIS_PID, 0) } }

sub redis_server {
    my ($dir) = @_;
    my $server = (grep { -x "$_/redis-server" } split /:/, $ENV{PATH} || '')[0];
    Test::More::plan(skip_all => 'redis-server is not installed (scripts/install-deps installs it)') unless $server;
    my $sock = "$dir/redis.sock";
    my $pid = fork;
    die "redis_server: cannot fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDOUT, '>', "$dir/redis.log" or POSIX::_exit(120);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(121);
        { no warnings 'exec'; exec "$server/redis-server", '--port', '0', '--unixsocket', $sock, '--save', '', '--appendonly', 'no', '--dir', $dir; }
        POSIX::_exit(122);
    }
    ($REDIS_PID, $REDIS_PARENT) = ($pid, $$);
    # Ready when it answers PING; the server ending first is a failure.
    my $ping = sub {
        require IO::Socket::UNIX;
        my $s = IO::Socket::UNIX->new(Peer => $sock) or return 0;
        print $s "PING\r\n";
        my $line = <$s>;
        return defined $line && $line =~ /\A\+PONG/;
    };
    my $ended = 0;
    until_true(sub { $ended = waitpid($pid, POSIX::WNOHANG()) == $pid; $ended || $ping->() }, 20)
      or Test::More::BAIL_OUT("redis-server did not answer PING on $sock within 20 s: " . slurp("$dir/redis.log"));
    Test::More::BAIL_OUT("redis-server ended before it answered: " . slurp("$dir/redis.log")) if $ended;
    my $url = "unix://$sock";
    my ($st, undef, $err) = capture([$COMMAND, 'status', '--redis', $url, 'probe'], env => { TOKENLOCK_ERRORS => 'json' });
    # 70 (ENOTSUP) from commands before open_lock, backend_unavailable since.
    Test::More::plan(skip_all => "the tokenlock command was built without Redis: $err")
      if $st >> 8 == 70 || ($st >> 8 == 69 && $err =~ /backend_unavailable/);
    return $url;
}

1;
