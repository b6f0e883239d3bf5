package Tokenlock;

# Perl binding of tokenlock. The lock is the protocol of docs/protocol.md
# written in plain Perl; writes and counters still run the `tokenlock`
# command. Nothing beyond the modules every Perl installation has is
# needed. The POD at the end is the manual.

use 5.008001;
use strict;
use warnings;

# Only small modules are loaded, since a CGI program pays for each of them
# at every hit: POSIX and Time::HiRes only where they are needed, FindBin
# not at all.
use Exporter ();
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);

our $VERSION   = '0.1.0';
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(with_lock write_file update_file increment read_counter);

# Errors are named as the library names them (tokenlock/errors.hpp): the
# command is run with TOKENLOCK_ERRORS=json, and its last line on stderr,
# {"error": NAME, "errno": N, "message": ...}, gives the name and errno.

# `tokenlock write` and `incr` wait this long for their lock unless told
# otherwise with -w, which older commands do not take.
my $COMMAND_LOCK_WAIT = 10;

# The running script's directory, as FindBin's $Bin, worked out now, before
# the script can change directories. FindBin itself is used when the script
# loaded it; otherwise this saves loading Cwd and File::Spec on every run.
# No script (perl -e, standard input): no directory.
my $SCRIPT_DIR = _script_dir();

sub _script_dir {
    return $FindBin::Bin if $INC{'FindBin.pm'} && defined $FindBin::Bin && length $FindBin::Bin;
    return undef if !defined $0 || $0 eq '-e' || $0 eq '-' || !-f $0;
    my ($dir) = $0 =~ m{\A(.*)/[^/]*\z}s;
    $dir = '.' unless defined $dir;
    $dir = '/' if $dir eq '';
    return $dir if $dir =~ m{\A/};
    # suEXEC runs a CGI program by its bare name in its own directory.
    my $cwd = readlink('/proc/self/cwd');
    if (!defined $cwd || $cwd !~ m{\A/}) {
        require Cwd;
        $cwd = Cwd::getcwd();
    }
    return defined $cwd ? ($dir eq '.' ? $cwd : "$cwd/$dir") : undef;
}

# Per command path and subcommand (write, incr): whether it takes -w. Found
# out by trying, once per process: an older command refuses the option as a
# usage error.
my %TAKES_WAIT;

# ---------------------------------------------------------------------------
# Errors

sub _error {
    my (%f) = @_;
    return Tokenlock::Error->new(%f);
}

sub _usage {
    my ($step, $what) = @_;
    die _error(code => 'bad_argument', message => "Tokenlock: $step: $what");
}

# ---------------------------------------------------------------------------
# Finding the command

sub _executable { my ($p) = @_; return defined $p && length $p && -f $p && -x _ }

sub _home {
    return $ENV{HOME} if defined $ENV{HOME} && length $ENV{HOME};
    # A CGI program usually runs without HOME.
    my $home = (getpwuid($<))[7];
    return $home;
}

sub command_path {
    my (%opts) = @_;
    return _find_command(\%opts, 'find the tokenlock command', undef);
}

sub _find_command {
    my ($opts, $step, $path) = @_;
    my $what = defined $path ? "$step $path" : $step;
    for my $given (
        [$opts->{command},         'the command option'],
        [$ENV{TOKENLOCK_COMMAND}, 'TOKENLOCK_COMMAND'],
      )
    {
        my ($p, $from) = @$given;
        next unless defined $p && length $p;
        # A path that was asked for is used or refused, never replaced by
        # another one found elsewhere: that would hide the mistake.
        return $p if _executable($p);
        my $why = -e $p ? (-d _ ? 'it is a directory' : 'it is not executable') : 'it does not exist';
        die _error(
            code    => 'no_command',
            message => "Tokenlock: $what: cannot use the tokenlock command $p (from $from): $why",
        );
    }
    my @looked;
    if (defined $SCRIPT_DIR) {
        my $p = "$SCRIPT_DIR/tokenlock";
        return $p if _executable($p);
        push @looked, $p;
    }
    my $home = _home();
    if (defined $home && length $home) {
        my $p = "$home/bin/tokenlock";
        return $p if _executable($p);
        push @looked, $p;
    }
    my $search = defined $ENV{PATH} ? $ENV{PATH} : '';
    for my $dir (split /:/, $search, -1) {
        my $p = (length $dir ? $dir : '.') . '/tokenlock';
        return $p if _executable($p);
    }
    push @looked, "PATH ($search)";
    die _error(
        code    => 'no_command',
        message => "Tokenlock: $what: cannot find the tokenlock command: looked for "
          . join(', ', @looked)
          . "; put it beside the script or in ~/bin, or set TOKENLOCK_COMMAND to its path",
    );
}

# ---------------------------------------------------------------------------
# Running the command

# A relative path starting with '-' would be read as an option.
sub _arg_path {
    my ($p) = @_;
    return $p =~ /^-/ ? "./$p" : $p;
}

# The child's side of _run: the standard handles set up, then exec; the
# errno of a failed exec goes back through $exec_w. Never returns.
sub _exec_child {
    my ($argv, $env, $in_r, $out_w, $err_w, $exec_w) = @_;
    # Perl marks its own descriptors close-on-exec, so only these three
    # reach the command, and $exec_w closes by itself when exec works.
    # Reopening a standard handle keeps its descriptor number; a tie
    # (a web framework's STDOUT) would take the reopening away.
    untie *STDIN;
    untie *STDOUT;
    untie *STDERR;
    # The error's name on the last line of stderr, as JSON.
    $ENV{TOKENLOCK_ERRORS} = 'json';
    # What the command must not get on its argv (a URL with a password).
    @ENV{ keys %$env } = values %$env if $env;
    my $ok = (defined $in_r ? open(STDIN, '<&', $in_r) : open(STDIN, '<', '/dev/null'))
      && open(STDOUT, '>&', $out_w) && open(STDERR, '>&', $err_w);
    # In an eval: whatever dies here (perl -T's "Insecure dependency") must
    # not return into the caller's code in this child.
    if ($ok) { no warnings 'exec'; eval { exec { $argv->[0] } @$argv; }; }
    my $errno = ($! + 0) || 1;
    syswrite($exec_w, $errno);
    # No END blocks, no destructors: they belong to the parent.
    require POSIX;
    POSIX::_exit(127);
}

# Runs argv without a shell, feeding $stdin (undef: /dev/null), and returns
# { status, stdout, stderr } or { spawn_error, exec_errno }.
sub _run {
    my ($argv, $stdin, $env) = @_;
    # A command that stops reading must not kill us with SIGPIPE; its exit
    # status says why it stopped. A caller's CHLD handler (or 'IGNORE')
    # would take the exit status away from waitpid.
    local $SIG{PIPE} = 'IGNORE';
    local $SIG{CHLD} = 'DEFAULT';

    my ($out_r, $out_w, $err_r, $err_w, $exec_r, $exec_w, $in_r, $in_w);
    unless (pipe($out_r, $out_w) && pipe($err_r, $err_w) && pipe($exec_r, $exec_w)
        && (!defined $stdin || pipe($in_r, $in_w)))
    {
        return { spawn_error => "cannot create a pipe: $!" };
    }
    my $pid = fork;
    return { spawn_error => "cannot fork: $!" } unless defined $pid;
    _exec_child($argv, $env, defined $stdin ? $in_r : undef, $out_w, $err_w, $exec_w) if $pid == 0;
    close $out_w;
    close $err_w;
    close $exec_w;
    if (defined $stdin) {
        close $in_r;
        # Non-blocking, so that a large input and a full stderr pipe cannot
        # wait for each other.
        my $fl = fcntl($in_w, F_GETFL, 0);
        fcntl($in_w, F_SETFL, $fl | O_NONBLOCK) if defined $fl;
        if (!length $stdin) { close $in_w; undef $in_w }
    }
    my %buf  = (out => '', err => '');
    my %open = (out => $out_r, err => $err_r);
    my $off  = 0;
    while (%open || $in_w) {
        my ($rbits, $wbits) = ('', '');
        vec($rbits, fileno($open{$_}), 1) = 1 for keys %open;
        vec($wbits, fileno($in_w), 1) = 1 if $in_w;
        my ($rout, $wout) = ($rbits, $wbits);
        my $n = select($rout, $wout, undef, undef);
        if ($n < 0) {
            next if $!{EINTR};
            last;
        }
        if ($in_w && vec($wout, fileno($in_w), 1)) {
            my $w = syswrite($in_w, $stdin, 65536, $off);
            if (defined $w) {
                $off += $w;
                if ($off >= length $stdin) { close $in_w; undef $in_w }
            }
            elsif (!$!{EAGAIN} && !$!{EINTR}) {
                close $in_w;
                undef $in_w;
            }
        }
        for my $k (keys %open) {
            next unless vec($rout, fileno($open{$k}), 1);
            my $r = sysread($open{$k}, $buf{$k}, 65536, length $buf{$k});
            next if !defined $r && ($!{EINTR} || $!{EAGAIN});
            if (!$r) { close $open{$k}; delete $open{$k} }
        }
    }
    my $errno = '';
    while (1) {
        my $r = sysread($exec_r, $errno, 16, length $errno);
        last if defined $r ? $r == 0 : !$!{EINTR};
    }
    close $exec_r;
    my $w;
    do { $w = waitpid($pid, 0) } while ($w == -1 && $!{EINTR});
    my $status = $w == $pid ? $? : -1;
    return { exec_errno => $errno + 0, spawn_error => 'exec' } if length $errno;
    return { status => $status, stdout => $buf{out}, stderr => $buf{err} };
}

# Runs the command; returns its stdout, or dies with a Tokenlock::Error
# that carries the command's own message (which names path, step, cause).
#   $ctx: step and path (for messages of our own), busy (the code for
#   status 1), opts (the caller's, for `command`), stdin.
sub _call {
    my ($ctx, @args) = @_;
    my $cmd  = _find_command($ctx->{opts} || {}, $ctx->{step}, $ctx->{path});
    my $what = "$ctx->{step} $ctx->{path}";
    # perl -T refuses to exec a tainted argv, in the child: said here, before.
    _untainted($what, 'the tokenlock command', $cmd);
    for my $i (0 .. $#args) {
        my $name = $i && $args[ $i - 1 ] =~ /\A-/ ? "the value of the command's $args[$i - 1]" : "the command's argument " . ($i + 1);
        _untainted($what, $name, $args[$i], 1);
    }
    my @argv = ($cmd, @args);
    my $r    = _run(\@argv, $ctx->{stdin}, $ctx->{env});
    if (defined $r->{spawn_error}) {
        if (defined $r->{exec_errno}) {
            local $! = $r->{exec_errno};
            die _error(
                code    => 'no_command',
                command => \@argv,
                message => "Tokenlock: $what: cannot run the tokenlock command $cmd: $!",
            );
        }
        die _error(code => 'system', command => \@argv, message => "Tokenlock: $what: $r->{spawn_error}");
    }
    my $status = $r->{status};
    return $r->{stdout} if $status == 0;

    my $message = $r->{stderr};
    $message =~ s/\s+\z//;
    if ($status == -1 || ($status & 127)) {
        my $how = $status == -1 ? 'vanished (its exit status was lost)' : 'was killed by signal ' . ($status & 127);
        $message = "Tokenlock: $what: the tokenlock command $how" . (length $message ? ": $message" : '');
        die _error(code => 'command_failed', command => \@argv, message => $message);
    }
    my $exit = $status >> 8;
    my ($code, $errno) = _error_line(\$message);
    $message = "Tokenlock: $what: the tokenlock command failed with exit status $exit and said nothing"
      unless length $message;
    if (!defined $code) {
        # No error line: a command from before --errors=json. Its exit
        # status alone says this much.
        $code = $exit == 1 ? ($ctx->{busy} || 'busy')
          : $exit == 3  ? 'lock_lost'
          : $exit == 64 ? 'bad_argument'
          : 'command_failed';
    }
    die _error(code => $code, errno => $errno, status => $exit, command => \@argv, message => $message,
        output => $r->{stdout});
}

# The name and errno from the command's JSON error line, the last line of
# stderr, which is then taken off the message; () when there is none.
sub _error_line {
    my ($message) = @_;
    return () unless $$message =~ s/(?:\A|\n)(\{"error": "([a-z_]+)", "errno": (-?[0-9]+), "message": .*\})\z//;
    my ($name, $errno) = ($2, $3 + 0);
    $$message =~ s/\s+\z//;
    return ($name, $errno);
}

# ---------------------------------------------------------------------------
# Option checking

sub _seconds {
    my ($step, $name, $v, $allow_zero) = @_;
    _usage($step, "$name must be a number of seconds, not " . (defined $v ? "\"$v\"" : 'undef'))
      unless defined $v && $v =~ /^(?:\d+(?:\.\d*)?|\.\d+)\z/;
    _usage($step, "$name must be more than 0 seconds") if !$allow_zero && $v == 0;
    return $v;
}

sub _sync {
    my ($step, $v) = @_;
    return 'file_and_dir' unless defined $v;
    _usage($step, "sync must be none, file or file_and_dir, not \"$v\"")
      unless $v eq 'none' || $v eq 'file' || $v eq 'file_and_dir';
    return $v;
}

# Under perl -T a tainted value that reaches rename, mkdir, chmod or exec
# makes perl die with its bare "Insecure dependency" at a line of this
# module, with the operation half done; refused before anything is touched.
# $hide: the value is not shown (a URL may hold a password).
sub _untainted {
    my ($step, $name, $v, $hide) = @_;
    return $v unless ${^TAINT} && defined $v && !ref $v;
    require Scalar::Util;
    return $v unless Scalar::Util::tainted($v);
    _usage($step, "$name" . ($hide ? '' : " \"$v\"") . ' is tainted (perl -T: it comes from outside the program, such as %ENV, '
          . '@ARGV or a file read), and the module does not launder it; untaint it with a regex that accepts '
          . 'only what you expect, as in my ($path) = $input =~ m{\\A(/home/alice/data/[\\w.-]+)\\z} or die');
}

# $reads_only: the call only reads (holder, read_counter), which perl -T
# allows with a tainted path.
sub _path_arg {
    my ($step, $name, $v, $reads_only) = @_;
    _usage($step, "$name must be a non-empty path") unless defined $v && length $v && !ref $v;
    _usage($step, "$name must not contain a NUL byte") if $v =~ /\0/;
    _untainted($step, $name, $v) unless $reads_only;
    return $v;
}

# --legacy-timeout SECS when asked for: a command from before legacy tokens
# refuses it, which is right, since it would not honour it.
sub _legacy_timeout {
    my ($step, $opts) = @_;
    return () unless defined $opts->{legacy_timeout};
    return ('--legacy-timeout', _seconds($step, 'legacy_timeout', $opts->{legacy_timeout}, 0));
}

# --group NAME when the option names one; TOKENLOCK_GROUP reaches the
# command through the environment. Checked here as the module checks it.
sub _group_args {
    my ($step, $opts) = @_;
    return () unless defined $opts->{group};
    _named_group($step, $opts->{group});
    return ('--group', $opts->{group});
}

sub _check_opts {
    my ($step, $opts, @known) = @_;
    return unless %$opts;
    my %k = map { $_ => 1 } @known, 'command';
    for (sort keys %$opts) {
        _usage($step, "unknown option '$_' (known: " . join(', ', sort keys %k) . ')') unless $k{$_};
    }
}

# ---------------------------------------------------------------------------
# The lock, natively: the protocol of docs/protocol.md in plain Perl. Every
# step is a rename(2) of a name this process saw; no process is started.
# Core Perl has no renameat or openat, so every call names its path: the
# lock directory is judged by lstat before each acquisition instead of
# once through a descriptor.

my $FREE = 'lockfile';

# The protocol's bound on leases (protocol_max_lease): every process must
# agree on which leases are implausible.
my $MAX_LEASE_US = 24 * 3600 * 1_000_000;
my $SKEW_US      = 1_000_000;
my $DIR_MODE     = 0755;
my $DEFAULT_LEASE = 3600;
my $DEFAULT_LEGACY_TIMEOUT = 60;

# Waiting: exponential backoff with +-25 % jitter, a look at the holder at
# most this often (and always on the last round).
my $BACKOFF_MIN_US = 100;
my $BACKOFF_MAX_US = 50_000;
my $LOOK_EVERY_US  = 10_000;

sub _now_us {
    my ($s, $us) = Time::HiRes::gettimeofday();
    return $s * 1_000_000 + $us;
}

# A Time::HiRes older than Perl 5.10's has no clock_gettime: the wall
# clock then bounds waits, which a clock step can lengthen or shorten.
my $HAVE_MONOTONIC;

sub _steady_us {
    $HAVE_MONOTONIC = defined &Time::HiRes::clock_gettime && eval { Time::HiRes::CLOCK_MONOTONIC(); 1 } ? 1 : 0
      unless defined $HAVE_MONOTONIC;
    return int(Time::HiRes::time() * 1_000_000) unless $HAVE_MONOTONIC;
    return int(Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) * 1_000_000);
}

sub _sleep_us { Time::HiRes::usleep($_[0]) if $_[0] > 0 }

# The entries of a directory, without . and .. and untainted: the kernel
# never lists a name holding '/' or NUL, and names are only ever used
# relative to the directory listed, never by a shell.
sub _names {
    my ($dh) = @_;
    return map { $_ eq '.' || $_ eq '..' ? () : /\A([^\/\0]+)\z/s ? $1 : () } readdir $dh;
}

# FNV-1a, 64 bits, as lib/src/fnv1a.hpp, in two 32-bit halves so that no
# product leaves the range a Perl number holds exactly.
sub _fnv1a {
    my ($s, $hi, $lo) = @_;
    ($hi, $lo) = (0xcbf29ce4, 0x84222325) unless defined $hi;
    for my $c (unpack 'C*', $s) {
        $lo ^= $c;
        # h * 0x100000001b3 = h * 0x1b3 + (h << 40), modulo 2**64.
        my $l = $lo * 0x1b3;
        my $h = $hi * 0x1b3 + int($l / 4294967296) + (($lo & 0xffffff) * 256);
        $lo = $l % 4294967296;
        $hi = $h % 4294967296;
    }
    return ($hi, $lo);
}

sub _first_line {
    my ($path) = @_;
    open my $fh, '<', $path or return '';
    my $line = <$fh>;
    close $fh;
    return '' unless defined $line;
    chomp $line;
    return $line;
}

# /proc/<pid>/stat: (state, start time), counted from the last ')' since
# the command name may hold spaces and parentheses; () when unreadable.
sub _proc_stat {
    my ($pid) = @_;
    open my $fh, '<', "/proc/$pid/stat" or return ();
    my $line = '';
    sysread($fh, $line, 1024);
    close $fh;
    my $close = rindex($line, ')');
    return () if $close < 0;
    my @f = split ' ', substr($line, $close + 1);
    # Fields from 3 on: state is field 3, the start time field 22.
    return () unless @f >= 20 && $f[19] =~ /\A(\d+)\z/;
    return ($f[0], $1);
}

# This process's identity, as lib/src/posix/posix_os.cpp makes it: read
# once per process, and again in a forked child.
my %ID;

sub _identity {
    return \%ID if defined $ID{pid} && $ID{pid} == $$;
    my $host = '';
    if (open my $fh, '<', '/proc/sys/kernel/hostname') {
        $host = <$fh>;
        close $fh;
        $host = '' unless defined $host;
        chomp $host;
    }
    if (!length $host) {
        # gethostname(2) reads the same name; uname(2) starts no process.
        require POSIX;
        $host = (POSIX::uname())[1];
        $host = '' unless defined $host;
    }
    $host = 'host' unless length $host;
    $host = substr($host, 0, 32);
    $host =~ s/[^A-Za-z0-9-]/_/g;
    my ($hi, $lo) = _fnv1a(_first_line('/proc/sys/kernel/random/boot_id'));
    my $ns = readlink('/proc/self/ns/pid');
    ($hi, $lo) = _fnv1a(defined $ns ? $ns : '', $hi, $lo);
    ($hi, $lo) = _fnv1a($host, $hi, $lo);
    my (undef, $start) = _proc_stat($$);
    %ID = (
        pid      => $$,
        start    => defined $start ? $start : 0,
        # Checked, and so untainted for perl -T: it goes into every token.
        host_tag => (sprintf('%s-%08x', $host, ($hi ^ $lo)) =~ /\A([A-Za-z0-9_-]{1,32}-[0-9a-f]{8})\z/)[0],
        random   => undef,
        pool     => '',
    );
    # The part of every token that is the same for the whole process.
    $ID{owner} = join('.', $ID{host_tag}, $ID{pid}, $ID{start});
    return \%ID;
}

# 64 random bits as 16 hex digits: unique per acquisition. The source is
# opened once per process; a forked child opens its own.
sub _nonce {
    my $id = _identity();
    # Read 8 bytes at a time, /dev/urandom costs a system call per
    # acquisition; a block serves 512 of them.
    if (length $id->{pool} < 16) {
        my $bytes = '';
        if (!$id->{random}) {
            open($id->{random}, '<', '/dev/urandom') or undef $id->{random};
            binmode $id->{random} if $id->{random};
        }
        if ($id->{random}) {
            my $n = sysread($id->{random}, $bytes, 4096);
            $bytes = '' unless defined $n && $n >= 8;
        }
        if (length $bytes < 8) {
            # No /dev/urandom (a chroot): time, pid and Perl's generator.
            $bytes = pack('NN', int(rand(4294967296)) ^ ($$ << 8), (_now_us() % 4294967296) ^ int(rand(4294967296)));
        }
        # Checked, and so untainted for perl -T: it goes into every token.
        ($id->{pool}) = unpack('H*', $bytes) =~ /\A([0-9a-f]+)\z/;
    }
    return substr($id->{pool}, 0, 16, '');
}

sub _make_token {
    my ($expiry_us, $id) = @_;
    return "$FREE." . int($expiry_us) . ".$id->{owner}." . _nonce();
}

# What a name in the lock directory is (token_name.cpp): 'free', 'held',
# 'legacy', 'malformed' (starts with "lockfile." but breaks the grammar,
# never taken over) or 'other'; with the parsed fields for held and legacy.
sub _classify {
    my ($name) = @_;
    return ('free') if $name eq $FREE;
    if ($name =~ /\Alockfile([0-9].*)\z/s) {
        my $s = $1;
        return ('other') unless $s =~ /\A[1-9][0-9]{0,11}\z/;
        return ('legacy', { expiry_us => $s * 1_000_000, legacy => 1, name => $name });
    }
    return ('other') unless substr($name, 0, 9) eq 'lockfile.';
    my @f = split /\./, substr($name, 9), -1;
    return ('malformed') unless @f == 5;
    my ($expiry, $tag, $pid, $start, $nonce) = @f;
    return ('malformed')
      unless $expiry =~ /\A(?:0|[1-9][0-9]{0,18})\z/ && (length $expiry < 19 || $expiry le '9223372036854775807')
      && length($tag) >= 10 && length($tag) <= 41 && $tag =~ /\A[A-Za-z0-9_-]+-[0-9a-f]{8}\z/
      && $pid =~ /\A[1-9][0-9]{0,9}\z/ && $pid <= 2147483647
      && $start =~ /\A(?:0|[1-9][0-9]{0,19})\z/ && (length $start < 20 || $start le '18446744073709551615')
      && $nonce =~ /\A[0-9a-f]{16}\z/;
    return ('held', { expiry_us => $expiry + 0, host_tag => $tag, pid => $pid + 0, start => $start, name => $name });
}

sub _utc {
    my ($us) = @_;
    my $s = int($us / 1_000_000);
    $s-- if $us < 0 && $s * 1_000_000 != $us;
    my @t = gmtime($s);
    return sprintf('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', $t[5] + 1900, $t[4] + 1, @t[3, 2, 1, 0], $us - $s * 1_000_000);
}

sub _secs_text {
    my ($us) = @_;
    return sprintf('%.3f s', $us / 1_000_000);
}

# Whether a held token is stale (lock_directory.cpp, judge): its lease
# ended, its lease is implausibly long, or its owner on this host is
# provably gone. Returns (stale, reason, owner), owner being 'alive' or
# 'dead' when this host could tell, else undef.
sub _judge {
    my ($t, $legacy_timeout_us) = @_;
    my $now = _now_us();
    if ($t->{legacy}) {
        my $ends = $t->{expiry_us} + $legacy_timeout_us;
        my $who = "a script using the legacy rename lock ($t->{name}, taken " . _utc($t->{expiry_us}) . ')';
        return (1, "legacy token of $who is dated implausibly far in the future: treated as stale")
          if $ends - $now > $MAX_LEASE_US + $SKEW_US;
        return (1, "legacy token of $who is older than the legacy timeout of " . _secs_text($legacy_timeout_us)
              . ' (by ' . _secs_text($now - $ends) . ')')
          if $now > $ends + $SKEW_US;
        return (0, "held by $who until " . _utc($ends) . ' (the legacy timeout of ' . _secs_text($legacy_timeout_us) . ')');
    }
    my $same = $t->{host_tag} eq _identity()->{host_tag};
    my $who = "pid $t->{pid}" . ($same ? ' on this host' : " on host $t->{host_tag}");
    return (1, "lease of $who ends implausibly far in the future (" . _utc($t->{expiry_us})
          . ', more than the maximum lease of ' . _secs_text($MAX_LEASE_US) . ' from now): treated as stale')
      if $t->{expiry_us} - $now > $MAX_LEASE_US + $SKEW_US;
    return (1, "lease of $who ended " . _secs_text($now - $t->{expiry_us}) . ' ago (' . _utc($t->{expiry_us}) . ')')
      if $now > $t->{expiry_us} + $SKEW_US;
    my $until = "held by $who until " . _utc($t->{expiry_us});
    return (0, $until) unless $same;
    # kill answering EPERM (another user's process) means alive, and so
    # does an unreadable /proc entry (hidepid): the lease settles it.
    if (!kill(0, $t->{pid}) && $!{ESRCH}) {
        return (1, "owner $who has exited", 'dead');
    }
    my ($state, $start) = _proc_stat($t->{pid});
    return (0, $until, 'alive') unless defined $state;
    return (1, "owner $who has exited (zombie)", 'dead') if $state eq 'Z' || $state eq 'X';
    return (1, "owner $who is gone; the pid now belongs to another process (start time $start, token says $t->{start})", 'dead')
      if $t->{start} ne '0' && $start ne $t->{start};
    return (0, $until, 'alive');
}

# The advice for an errno, as the library's table gives it in spirit.
sub _errno_fix {
    my ($errno, $dir) = @_;
    local $! = $errno;
    return "check the permissions of $dir and its parent: this process (uid $>) must be able to write and search them"
      if $!{EACCES} || $!{EPERM};
    return "the filesystem of $dir is mounted read-only: keep locks on a writable filesystem" if $!{EROFS};
    return "the filesystem of $dir is full or over quota: free space" if $!{ENOSPC} || $!{EDQUOT};
    return "a component of $dir is not a directory: name a directory of its own, such as data.lock" if $!{ENOTDIR};
    return "the path $dir is too long: use a shorter one" if $!{ENAMETOOLONG};
    return "a symbolic link loop lies on the path to $dir: fix or remove the link" if $!{ELOOP};
    return '';
}

# A failed system call: code system with its errno, the exit status the
# command would give, and a message that names path, step, cause and fix.
my %EXIT_FOR_ERRNO;

sub _system_error {
    my ($step, $dir, $what, $errno, $fix) = @_;
    local $! = $errno;
    my $cause = "$!";
    unless (%EXIT_FOR_ERRNO) {
        require POSIX;
        for ([77, qw(EACCES EPERM)], [66, 'ENOENT'], [73, qw(ENOSPC EDQUOT EROFS EFBIG EISDIR ENOTDIR ENAMETOOLONG)],
            [74, 'EIO'], [65, qw(EOVERFLOW ELOOP EINVAL)])
        {
            my ($code, @names) = @$_;
            for my $n (@names) {
                my $v = eval { no strict 'refs'; &{"POSIX::$n"}() };
                $EXIT_FOR_ERRNO{$v} = $code if defined $v;
            }
        }
    }
    $fix = _errno_fix($errno, $dir) unless defined $fix;
    return _error(
        code    => 'system',
        errno   => $errno,
        status  => $EXIT_FOR_ERRNO{$errno} || 71,
        message => "tokenlock: $step $dir: $what: $cause" . (length $fix ? "; $fix" : ''),
    );
}

my %EXIT_FOR_CODE = (
    busy => 1, timed_out => 1, lock_lost => 3, token_missing => 69, lock_corrupt => 69,
    bad_argument => 64, untrusted => 77, not_owner => 70,
);

sub _lock_error {
    my ($code, $step, $dir, $what) = @_;
    return _error(code => $code, status => $EXIT_FOR_CODE{$code}, message => "tokenlock: $step $dir: $what");
}

# The lock directory's path split as lock_directory.cpp splits it.
# Parsed once per path: a long-running process locks the same few.
my %PATHS;

sub _lock_paths {
    my ($step, $lockdir) = @_;
    my $p = $PATHS{$lockdir};
    return $p if $p;
    (my $d = $lockdir) =~ s{(?<=.)/+\z}{};
    _usage("$step $lockdir",
        "\"$d\" cannot be a lock directory: the lock directory is created and replaced by rename; "
          . 'name a directory of its own, such as data.lock')
      if $d eq '/' || $d eq '.' || $d eq '..';
    my ($parent, $name) = $d =~ m{\A(.*)/([^/]*)\z}s ? ($1, $2) : ('.', $d);
    $parent = '/' if $parent eq '';
    %PATHS = () if keys %PATHS >= 1000;
    return $PATHS{$lockdir} = { dir => $d, parent => $parent, name => $name };
}

# The mode of lock directories and workspaces this process creates:
# TOKENLOCK_DIR_MODE, as the command reads it, else 0755. Group write
# (0775, 0770) without a named group chooses the group of a lock directory
# this user owns for sharing (docs/security.md, Who is trusted).
sub _dir_mode {
    my ($step) = @_;
    my $text = $ENV{TOKENLOCK_DIR_MODE};
    return $DIR_MODE unless defined $text && length $text;
    _usage($step, "TOKENLOCK_DIR_MODE takes an octal mode such as 0775, not \"$text\"")
      unless $text =~ /\A([0-7]+)\z/ && oct($1) <= 07777;
    my $mode = oct $1;
    my $problem = ($mode & 0700) != 0700 ? 'the owner needs read, write and search permission (0700) on a lock directory'
      : $mode & 0002 ? 'a lock directory writable by others is refused by every process that uses it '
      . '(docs/security.md): share it with a group instead, with 0775 or 0770 and a common group'
      : $mode & 01000 ? 'in a sticky lock directory only a token\'s owner may rename it, so users lock each other out'
      : undef;
    _usage($step, "TOKENLOCK_DIR_MODE $text: $problem") if defined $problem;
    return $mode;
}

# Group names resolved by this process: the group database is read once.
my %GID_OF;

# The group named for sharing: the option `group`, else TOKENLOCK_GROUP; a
# group name or a decimal gid, of which this user must be a member. Returns
# its gid, or undef when none is named.
sub _named_group {
    my ($step, $opt) = @_;
    my $g = defined $opt ? $opt : $ENV{TOKENLOCK_GROUP};
    return undef unless defined $g && length $g;
    my $from = defined $opt ? 'the group option' : 'TOKENLOCK_GROUP';
    _usage($step, "$from must be a group name or a decimal gid, not a reference") if ref $g;
    my $gid = $GID_OF{$g};
    if (!defined $gid) {
        if ($g =~ /\A([0-9]{1,10})\z/) { $gid = $1 + 0 }
        else {
            my @gr = getgrnam($g);
            _usage($step, "$from names the group \"$g\", which this host does not know: name an existing group "
                  . '(getent group lists them) or give its gid')
              unless @gr;
            $gid = $gr[2];
        }
        # Untainted: a gid is only ever compared and passed to chown.
        ($gid) = "$gid" =~ /\A([0-9]+)\z/;
        %GID_OF = () if keys %GID_OF >= 100;
        $GID_OF{$g} = $gid;
    }
    _usage($step, "$from names group $g (gid $gid), and this process (uid $>) is not a member of it: a group is shared "
          . 'only by its members; add the user to the group (usermod -a -G), or name a group it is in (id -G lists them)')
      unless grep { $_ == $gid } split ' ', $);
    return $gid;
}

# The group chosen for sharing in a lock directory of lstat $st: the named
# one, else, when the directory mode has group write, the group of a lock
# directory this user owns; undef when none is chosen.
sub _chosen_group {
    my ($step, $named, $st) = @_;
    return $named if defined $named;
    return undef unless $st && $st->[4] == $> && (_dir_mode($step) & 020);
    return $st->[5];
}

sub _group_shown {
    my ($gid) = @_;
    my $name = getgrgid($gid);
    return defined $name ? "$name (gid $gid)" : "gid $gid";
}

# The trust rules of docs/security.md (trust.cpp) for a directory's lstat:
# the reason it cannot be trusted, or undef. $chosen: the group chosen for
# sharing (undef: none); $named: chosen by name; $lockdir: the lock
# directory itself, another user's of which is trusted only under a named
# group. Being a member of a group, without choosing it, trusts nothing.
sub _distrust {
    my ($path, $mode, $uid, $gid, $chosen, $named, $lockdir) = @_;
    my $m = sprintf('%04o', $mode & 07777);
    my $share = 'share it through one group instead: mode 0775 and that group named with the group option or '
      . 'TOKENLOCK_GROUP (docs/security.md)';
    return "it is writable by every user (mode $m); run chmod o-w $path if its contents are yours, or remove it; $share"
      if $mode & 002;
    my $in_chosen = defined $chosen && $gid == $chosen;
    if (($mode & 020) && !$in_chosen) {
        my $g = _group_shown($gid);
        return "it is writable by group $g (mode $m), which is not the group chosen for sharing; run chmod g-w $path "
          . 'if the group is not meant to share it; otherwise name the group: the group option or TOKENLOCK_GROUP='
          . (getgrgid($gid) || $gid);
    }
    return "it belongs to uid $uid (mode $m), who could change it; have that user (or root) remove it and it is "
      . 'created again on next use, or, if that user shares it on purpose, name the group you both share: the group '
      . 'option or TOKENLOCK_GROUP=' . (getgrgid($gid) || $gid)
      if $uid != $> && $uid != 0 && !($in_chosen && ($named || !$lockdir));
    return undef;
}

# Judges the lock directory before anything in it is touched: 1 when it
# is there and trusted, 0 when it is missing; dies otherwise. $o->{group}
# is the named group; $o->{chosen} is set to the group chosen in it.
# The verdicts this process reached, by lock directory: its lstat (device,
# inode, mode, owner, group) and what else the rules depend on, and the
# chosen group. The same directory, unchanged, is not judged again; a
# replaced or changed one is.
my %TRUSTED;

# Built only of untainted parts: under perl -T a tainted value anywhere in
# a statement taints every value that statement makes.
sub _trust_key {
    my ($st, $named) = @_;
    my $mode = $ENV{TOKENLOCK_DIR_MODE};
    my $key = join(':', @$st[0, 1, 2, 4, 5], $>, defined $named ? $named : '');
    return $key unless defined $mode;
    return $mode =~ /\A([0-7]*)\z/ ? "$key:$1" : "$key:?";
}

sub _check_dir {
    my ($step, $p, $o) = @_;
    my @st = lstat $p->{dir};
    if (!@st) {
        return 0 if $!{ENOENT};
        die _system_error($step, $p->{dir}, 'cannot look at the lock directory', $! + 0);
    }
    my $key = _trust_key(\@st, $o->{group});
    my $known = $TRUSTED{$p->{dir}};
    if (defined $known && $known->[0] eq $key) {
        $o->{chosen} = $known->[1];
        return 1;
    }
    require Fcntl;
    if (Fcntl::S_ISLNK($st[2])) {
        die _lock_error('untrusted', $step, $p->{dir},
            "refusing a lock directory that is a symbolic link (owner uid $st[4]): tokenlock never follows one there; "
              . 'name the directory it points to, or remove the link');
    }
    if (!Fcntl::S_ISDIR($st[2])) {
        die _system_error($step, $p->{dir}, 'cannot open the lock directory', POSIX::ENOTDIR());
    }
    my $chosen = _chosen_group($step, $o->{group}, \@st);
    my $why = _distrust($p->{dir}, $st[2], $st[4], $st[5], $chosen, defined $o->{group}, 1);
    die _lock_error('untrusted', $step, $p->{dir},
        sprintf('refusing the lock directory (owner uid %d, mode %04o; this process runs as uid %d): '
              . 'another user could plant or swap entries in it, and nothing in it was touched; %s',
            $st[4], $st[2] & 07777, $>, $why))
      if defined $why;
    %TRUSTED = () if keys %TRUSTED >= 1000;
    $TRUSTED{$p->{dir}} = [$key, $chosen];
    $o->{chosen} = $chosen;
    return 1;
}

# Lists the lock directory and classifies it (lock_directory.cpp,
# observe). A listing is not a snapshot: an anomaly is concluded only when
# a second listing a moment later agrees.
sub _observe {
    my ($step, $p) = @_;
    my ($names, $tokens, $malformed);
    for my $round (0, 1) {
        my $dh;
        if (!opendir($dh, $p->{dir})) {
            return { kind => 'missing' } if $!{ENOENT};
            die _system_error($step, $p->{dir}, 'cannot list the lock directory', $! + 0);
        }
        my @all = grep { $_ ne '.' && $_ ne '..' } _names($dh);
        closedir $dh;
        my (%tok, @bad);
        my %info;
        for my $n (@all) {
            my ($kind, $t) = _classify($n);
            if ($kind eq 'free' || $kind eq 'held' || $kind eq 'legacy') { $tok{$n} = 1; $info{$n} = $t }
            elsif ($kind eq 'malformed') { push @bad, $n }
        }
        ($names, $tokens, $malformed) = (\@all, [sort keys %tok], \@bad);
        if (!@bad && @$tokens == 1) {
            my $n = $tokens->[0];
            return { kind => 'free' } if $n eq $FREE;
            return { kind => 'held', token => $info{$n} };
        }
        return { kind => 'empty' } unless @all;
        _sleep_us(2000) if $round == 0;
    }
    my $shown = sub { join ', ', map { (my $s = $_) =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge; $s } @_ };
    die _lock_error('lock_corrupt', $step, $p->{dir},
        'entry that is not a valid token: ' . $shown->(@$malformed)
          . '; tokenlock never repairs a lock by itself: if no process uses this lock, remove the directory '
          . 'and it is recreated on next use')
      if @$malformed;
    die _lock_error('token_missing', $step, $p->{dir},
        'the lock directory holds no token (it holds: ' . $shown->(@$names)
          . '); someone removed the token outside the protocol, so a holder may still be inside its critical '
          . 'section: once no process uses this lock, remove the directory and it is recreated on next use')
      unless @$tokens;
    die _lock_error('lock_corrupt', $step, $p->{dir},
        'the lock directory holds ' . scalar(@$tokens) . ' tokens: ' . $shown->(@$tokens)
          . '; a lock has exactly one token unless files were copied or created outside the protocol: '
          . 'once no process uses this lock, remove the directory and it is recreated on next use');
}

sub _fsync_dir {
    my ($path) = @_;
    require IO::Handle;
    my $fh;
    sysopen($fh, $path, Fcntl::O_RDONLY() | (eval { Fcntl::O_DIRECTORY() } || 0)) or return 0;
    my $ok = $fh->sync;
    close $fh;
    return $ok ? 1 : 0;
}

# Creates the lock directory (docs/protocol.md, Creating the lock
# directory): a populated temporary directory beside it, renamed onto its
# name, which succeeds only while that name is missing or an empty
# directory, so that concurrent creators cannot make two tokens.
sub _create_dir {
    my ($step, $p, $lease_us, $group) = @_;
    # A named group: the directory gets it, and group write.
    my $mode = _dir_mode($step) | (defined $group ? 0070 : 0);
    my $id = _identity();
    my $owned = _make_token(_now_us() + $lease_us, $id);
    my $name = "$p->{name}.init." . substr($owned, 9);
    $name = "$p->{name}.init." . _nonce() if length $name > 255;
    my $init = "$p->{parent}/$name";
    if (!mkdir($init, 0700)) {
        my $errno = $! + 0;
        die _system_error($step, $p->{dir}, "cannot create the temporary directory $init", $errno,
            $!{ENOENT} ? 'the parent directory of the lock directory must exist' : undef);
    }
    # The umask must not narrow the mode: applied exactly.
    my $fail;
    if (defined $group && !chown(-1, $group, $init)) { $fail = [$! + 0, "cannot give $init the group " . _group_shown($group)] }
    elsif (!chmod($mode, $init)) { $fail = [$! + 0, "cannot set the mode of $init"] }
    elsif (!mkdir("$init/$FREE", 0700) || !chmod(_shared_mode($mode, $init, "$init/$FREE"), "$init/$FREE")) {
        $fail = [$! + 0, "cannot create the token $init/$FREE"];
    }
    elsif (!_fsync_dir($init)) { $fail = [$! + 0, "cannot sync $init"] }
    if ($fail) {
        rmdir "$init/$FREE";
        rmdir $init;
        die _system_error($step, $p->{dir}, $fail->[1], $fail->[0]);
    }
    if (rename($init, $p->{dir})) {
        # Not an error of the lock if this fails: the directory works, and a
        # crash that undoes it is repaired by the next acquisition.
        _fsync_dir($p->{parent});
        _sweep_leftovers($p);
        return;
    }
    my $errno = $! + 0;
    my $lost = $!{ENOTEMPTY} || $!{EEXIST} || $!{ENOENT}
      # sshfs answers EPERM where a local filesystem says ENOTEMPTY.
      || (($!{EPERM} || $!{EACCES}) && -d $p->{dir});
    rmdir "$init/$FREE";
    rmdir $init;
    die _system_error($step, $p->{dir}, "cannot rename $init to the lock directory", $errno) unless $lost;
    _sweep_leftovers($p);
}

# The mode for $path, a directory this process made inside $in (or for the
# group $gid): it gets that directory's group, which is the chosen one, as
# a new directory takes this process's group instead; where it cannot, it
# is not group-writable, so that no group but the chosen one can write it.
sub _shared_mode {
    my ($mode, $in, $path, $gid) = @_;
    return $mode unless $mode & 020;
    $gid = (lstat $in)[5] if !defined $gid && defined $in;
    return $mode if defined $gid && ((lstat $path)[5] == $gid || chown(-1, $gid, $path));
    return $mode & ~020;
}

# Removes creation directories whose creator is gone or past its lease:
# only our own, only directories, never through a symbolic link.
sub _sweep_leftovers {
    my ($p) = @_;
    my $prefix = "$p->{name}.init.";
    opendir(my $dh, $p->{parent}) or return;
    my @names = grep { length $_ > length $prefix && substr($_, 0, length $prefix) eq $prefix } _names($dh);
    closedir $dh;
    for my $n (@names) {
        my $path = "$p->{parent}/$n";
        my @st = lstat $path or next;
        next if !Fcntl::S_ISDIR($st[2]) || $st[4] != $>;
        my $rest = substr($n, length $prefix);
        my ($kind, $t) = _classify("lockfile.$rest");
        my $stale;
        if ($kind eq 'held') { ($stale) = _judge($t, 0) }
        elsif ($rest =~ /\A[0-9a-f]{16}\z/) { $stale = $st[9] * 1_000_000 <= _now_us() - $MAX_LEASE_US - $SKEW_US }
        next unless $stale;
        rmdir "$path/$FREE";
        rmdir $path;
    }
}

# Empties a token taken over from a previous owner: its workspace and
# leftovers. Core Perl has no openat or unlinkat, and a path walked twice
# can name another place the second time: a member of the chosen group may
# write the lock directory and rename our token away with a link to a
# victim's directory in its place; a token left writable by others lets
# them do that to its subdirectories. Moving the token aside first would
# not help, since the lock directory is no more private than the token.
# So the walk pins each directory it clears as the working directory and
# checks lstat('.') against the identity judged before entering: from then
# on every entry is named by one component relative to it, and no rename or
# link anywhere on the path can lead the walk elsewhere. The token is
# judged first (not touched at all if untrusted), only directories of this
# user are entered, and a link is removed, never followed. The working
# directory is restored through a handle (fchdir); when none can be had,
# nothing is cleared: leftovers cost room, never safety.
sub _clear_token {
    my ($p, $token, $keep_marks, $chosen) = @_;
    my $path = "$p->{dir}/$token";
    my @st = lstat $path or return;
    return if !Fcntl::S_ISDIR($st[2]) || defined _distrust($path, @st[2, 4, 5], $chosen, 0, 0);
    my $back = _cwd_handle() or return;
    _clear_here(\@st, 0, $keep_marks) if chdir $path;
    chdir $back
      or die _system_error('take over', $p->{dir}, 'cannot return to the working directory after clearing the token '
          . "$token", $! + 0, 'the working directory was removed or made unsearchable meanwhile');
}

# A handle on the working directory that chdir can return to: read
# permission is needed for opendir; O_PATH (Linux) does without.
sub _cwd_handle {
    my $dh;
    return $dh if opendir($dh, '.');
    my $o_path = $^O eq 'linux' ? 010000000 : 0;
    return undef unless $o_path;
    sysopen(my $fh, '.', $o_path | (eval { Fcntl::O_DIRECTORY() } || 0)) or return undef;
    return $fh;
}

# Clears the working directory if it is the directory $want (an lstat)
# names; the walk of _clear_token. Returns 0 when it could not return to
# the directory it came from.
sub _clear_here {
    my ($want, $depth, $keep_marks) = @_;
    my @here = lstat '.';
    return 1 unless @here && $here[0] == $want->[0] && $here[1] == $want->[1];
    opendir(my $dh, '.') or return 1;
    my @names = _names($dh);
    for my $n (@names) {
        # Owner marks were judged one by one; ours stays.
        next if $keep_marks && $depth == 0 && _token_of_mark($n);
        my @st = lstat $n or next;
        if (!Fcntl::S_ISDIR($st[2])) {
            unlink $n;
            next;
        }
        if ($depth < 8 && $st[4] == $> && chdir $n) {
            my $ok = _clear_here(\@st, $depth + 1, 0);
            return 0 unless $ok && chdir $dh;
        }
        rmdir $n;
    }
    return 1;
}

# ---------------------------------------------------------------------------
# Owner marks (docs/protocol.md, Owner marks): where a rename can move a
# name that is gone (GlusterFS), each new holder marks the token it renamed
# and steps back when it finds another live holder's mark there.

# Filesystems whose renames keep the protocol's property by themselves:
# local ones (the wait board's allowlist), and network ones whose server
# renames by name.
my %NO_MARKS = map { $_ => 1 } qw(ext2 ext3 ext4 xfs btrfs tmpfs ramfs f2fs overlay zfs reiserfs jfs
  bcachefs nilfs2 fuse.sshfs fuse.mfs fuse.moosefs nfs nfs4 cifs smb3 ceph fuse.ceph fuse.ceph-fuse);

# Per lock directory: whether marks are made. Tests set this to force them.
our %OWNER_MARKS;

# The type of the filesystem holding $path, from the mount table by device
# number; undef when it cannot be told.
sub _fs_type {
    my ($path, $table) = @_;
    my @st = stat $path or return undef;
    my $dev = $st[0];
    my $major = (($dev >> 8) & 0xfff) | (($dev >> 32) & ~0xfff);
    my $minor = ($dev & 0xff) | (($dev >> 12) & ~0xff);
    # $table: another mount table, for tests.
    open(my $fh, '<', defined $table ? $table : '/proc/self/mountinfo') or return undef;
    my ($type, @mounts);
    while (my $line = <$fh>) {
        my @f = split ' ', $line;
        my ($sep) = grep { $f[$_] eq '-' } 6 .. $#f;
        next unless @f > 4 && defined $sep && defined $f[$sep + 1];
        if ($f[2] eq "$major:$minor") {
            $type = $f[$sep + 1];
            last;
        }
        (my $point = $f[4]) =~ s/\\([0-7]{3})/chr oct $1/ge;
        push @mounts, [$point, $f[$sep + 1]];
    }
    close $fh;
    return $type if defined $type;
    # A device no mount names (a btrfs subvolume): the mount whose point is
    # the longest prefix of the real path.
    require Cwd;
    my $real = Cwd::abs_path($path);
    return undef unless defined $real;
    my $best = '';
    for my $m (@mounts) {
        my $pt = $m->[0];
        next unless $real eq $pt || $pt eq '/' || substr($real, 0, length($pt) + 1) eq "$pt/";
        ($best, $type) = ($pt, $m->[1]) if length $pt >= length $best;
    }
    return $type;
}

sub _needs_marks {
    my ($p) = @_;
    return $OWNER_MARKS{$p->{dir}} if defined $OWNER_MARKS{$p->{dir}};
    # The lock directory may not exist yet; its parent is then asked.
    my $type = _fs_type($p->{dir});
    $type = _fs_type($p->{parent}) unless defined $type;
    # A filesystem that cannot be asked gets marks, as in the library.
    return $OWNER_MARKS{$p->{dir}} = defined $type && $NO_MARKS{$type} ? 0 : 1;
}

sub _mark_of { my ($token) = @_; return 'h.' . substr($token, 9) }

# The held token a mark names, or undef when it is no mark.
sub _token_of_mark {
    my ($n) = @_;
    return undef unless substr($n, 0, 2) eq 'h.';
    my $t = 'lockfile.' . substr($n, 2);
    my ($kind, $info) = _classify($t);
    return $kind eq 'held' ? $info : undef;
}

sub _owner_part { my ($token) = @_; (my $o = $token) =~ s/\Alockfile\.[0-9]+\.//; return $o }

# The live marks in a token other than ours, after removing those of the
# owner taken over from and those of dead or expired owners: the first
# live one's (token, reason), or ().
sub _judge_marks {
    my ($path, $ours, $taken_from, $o) = @_;
    opendir(my $dh, $path) or return ('gone', $!{ENOENT} || $!{ESTALE} ? undef : $! + 0);
    my @names = _names($dh);
    closedir $dh;
    my $taken_owner = defined $taken_from ? _owner_part($taken_from) : undef;
    my @live;
    for my $n (@names) {
        next if $n eq $ours;
        my $t = _token_of_mark($n) or next;
        if (defined $taken_owner && _owner_part($t->{name}) eq $taken_owner) {
            rmdir "$path/$n";
            next;
        }
        my ($stale, $reason) = _judge($t, $o->{legacy_timeout_us});
        if ($stale) {
            rmdir "$path/$n";
            next;
        }
        @live = ($t->{name}, $reason) unless @live;
    }
    return ('seen', @live);
}

# Confirms with an owner mark a token that a rename made ours: 'held',
# ('yielded', reason) after handing the token back to the live holder whose
# mark is in it, or 'abandoned' when the token is gone from under us.
sub _mark_and_check {
    my ($step, $p, $o, $token, $taken_from) = @_;
    my $path = "$p->{dir}/$token";
    my $mark = _mark_of($token);
    my $ok;
    for (1 .. 3) {
        $ok = mkdir("$path/$mark", 0700) || $!{EEXIST};
        last if $ok || !$!{ESTALE};
    }
    # Gone already: a second rename of the name we took moved our token.
    return ('abandoned') if !$ok && ($!{ENOENT} || $!{ESTALE});
    return _give_up($step, $p, $o, $token, $taken_from, 'cannot make the owner mark in', $! + 0) unless $ok;
    my ($what, @live) = _judge_marks($path, $mark, $taken_from, $o);
    if ($what eq 'gone') {
        return _give_up($step, $p, $o, $token, $taken_from, 'cannot list the owner marks in', $live[0])
          if defined $live[0];
        rmdir "$path/$mark";
        return ('abandoned');
    }
    return ('held') unless @live;
    # The mark stays inside during the rename: whoever holds the directory
    # through a stale name of its own meanwhile finds it and steps back too.
    my $back = "$p->{dir}/$live[0]";
    if (rename($path, $back)) { rmdir "$back/$mark" }
    else { rmdir "$path/$mark" }
    return ('yielded', $live[1]);
}

sub _give_up {
    my ($step, $p, $o, $token, $taken_from, $what, $errno) = @_;
    my $path = "$p->{dir}/$token";
    rmdir "$path/" . _mark_of($token);
    my ($seen, @live) = _judge_marks($path, _mark_of($token), $taken_from, $o);
    my $outcome = '; the token stays until its lease ends';
    $outcome = '; the lock was freed again' if $seen eq 'seen' && !@live && rename($path, "$p->{dir}/$FREE");
    my $err = _system_error($step, $p->{dir}, "$what $token", $errno);
    $err->{message} .= $outcome;
    die $err;
}

# The holder of a lock directory, judged as an acquisition would judge it:
# undef when the lock is free or its directory missing.
sub holder {
    my ($lockdir, %opts) = @_;
    my $step = 'holder';
    _check_opts($step, \%opts, qw(legacy_timeout group));
    _path_arg($step, 'the lock directory', $lockdir, 1);
    require Time::HiRes;
    require Fcntl;
    require POSIX;
    my $p = _lock_paths($step, $lockdir);
    return undef unless _check_dir($step, $p, { group => _named_group($step, $opts{group}) });
    my $obs = _observe($step, $p);
    return undef unless $obs->{kind} eq 'held';
    my $t = $obs->{token};
    my $legacy_us = int(1_000_000 *
        (defined $opts{legacy_timeout} ? _seconds($step, 'legacy_timeout', $opts{legacy_timeout}, 0) : $DEFAULT_LEGACY_TIMEOUT));
    my ($stale, $reason, $owner) = _judge($t, $legacy_us);
    my $ends = $t->{legacy} ? $t->{expiry_us} + $legacy_us : $t->{expiry_us};
    return {
        token      => $t->{name},
        path       => "$p->{dir}/$t->{name}",
        expires_us => $ends,
        expires    => _utc($ends),
        host_tag   => $t->{legacy} ? '' : $t->{host_tag},
        same_host  => !$t->{legacy} && $t->{host_tag} eq _identity()->{host_tag} ? 1 : 0,
        pid        => $t->{legacy} ? 0 : $t->{pid},
        start_time => $t->{legacy} ? 0 : $t->{start},
        owner      => defined $owner ? $owner : 'unknown',
        stale      => $stale ? 1 : 0,
        reason     => $reason,
        legacy     => $t->{legacy} ? 1 : 0,
    };
}


# One round of the protocol: the fast-path rename, then, when $look is
# set, a look at the directory and a creation or takeover if it needs one.
# Returns ('acquired', token, expiry, marked), ('again'), or ('busy',
# reason). $o->{given_up}: tokens of ours that a rename made ours but the
# owner mark did not confirm; should one show up under our name again, it
# is ours to confirm, not a live holder's to wait for.
sub _round {
    my ($step, $p, $o, $look, $first) = @_;
    my $id = _identity();
    my $expiry = _now_us() + $o->{lease_us};
    my $token = _make_token($expiry, $id);
    my $mine = "$p->{dir}/$token";
    # After the first round a lookup, which takes no lock, tells whether a
    # rename, which locks the directory, can succeed.
    my $try = $first || -e "$p->{dir}/$FREE";
    if ($try) {
        return _finish($step, $p, $o, $token, $expiry, undef) if rename("$p->{dir}/$FREE", $mine);
        my $errno = $! + 0;
        if (!$!{ENOENT}) {
            die _system_error($step, $p->{dir}, "cannot rename lockfile to $token", $errno)
              unless $!{EPERM};
            my @st = lstat "$p->{dir}/$FREE";
            die _system_error($step, $p->{dir}, "cannot rename lockfile to $token", $errno,
                (-k $p->{dir} && @st)
                ? "lock directory $p->{dir} is sticky and the token belongs to uid $st[4] (we are uid $>); "
                  . 'use a non-sticky directory shared by the users that lock'
                : 'the filesystem or a file attribute forbids this rename; a sticky directory only lets the '
                  . "token's owner rename it");
        }
        # An NFS client may retransmit a rename whose reply was lost.
        return _finish($step, $p, $o, $token, $expiry, undef) if lstat $mine;
    }
    return ('busy', undef) unless $look;
    if (!_check_dir($step, $p, $o)) {
        _create_dir($step, $p, $o->{lease_us}, $o->{group});
        return ('again');
    }
    my $obs = _observe($step, $p);
    if ($obs->{kind} eq 'missing' || $obs->{kind} eq 'empty') {
        _create_dir($step, $p, $o->{lease_us}, $o->{group});
        return ('again');
    }
    return ('again') if $obs->{kind} eq 'free';
    my $seen = $obs->{token};
    return _finish($step, $p, $o, $seen->{name}, $seen->{expiry_us}, undef) if $o->{given_up}{ $seen->{name} };
    my ($stale, $reason) = _judge($seen, $o->{legacy_timeout_us});
    if (!$stale) {
        # Nothing else looks at the parent once the lock directory exists,
        # and a waiter has time to spare.
        _sweep_leftovers($p) if int(rand(32)) == 0;
        return ('busy', $reason);
    }
    # Exactly the name we judged: if its owner refreshed or released it, or
    # another taker was first, the name is gone and the rename fails
    # without touching anyone's token.
    $expiry = _now_us() + $o->{lease_us};
    $token  = _make_token($expiry, $id);
    $mine   = "$p->{dir}/$token";
    if (!rename("$p->{dir}/$seen->{name}", $mine)) {
        return ('again') if $!{ENOENT};
        die _system_error('take over', $p->{dir}, "cannot rename stale token $seen->{name} ($reason)", $! + 0);
    }
    return _finish($step, $p, $o, $token, $expiry, $seen->{name});
}

# A rename made $token ours (taking over $taken_from, if defined). Where a
# rename can move a token through a name it no longer has, the owner mark
# confirms it first.
sub _finish {
    my ($step, $p, $o, $token, $expiry, $taken_from) = @_;
    my $marks = _needs_marks($p);
    if ($marks) {
        my ($m, $holder) = _mark_and_check($step, $p, $o, $token, $taken_from);
        if ($m ne 'held') {
            $o->{given_up}{$token} = 1;
            return ('busy', defined $holder ? $holder : 'taken by another client at the same moment');
        }
    }
    if (defined $taken_from) {
        # The previous owner's leftovers, and maybe a creator's that died too.
        _clear_token($p, $token, $marks, $o->{chosen});
        _sweep_leftovers($p);
    }
    return ('acquired', $token, $expiry, $marks);
}

# Acquires natively; returns (token, expiry_us) or dies with busy,
# timed_out or another error. $o: lease_us, legacy_timeout_us, wait_us
# (undef: forever; 0: one try).
my $SET_UP;

sub _native_setup {
    return if $SET_UP;
    require Time::HiRes;
    require Fcntl;
    require POSIX;
    require IO::Handle;
    $SET_UP = 1;
}

sub _native_acquire {
    my ($step, $lockdir, $o) = @_;
    _native_setup();
    my $p = _lock_paths($step, $lockdir);
    my $first = 1;
    # The directory is judged before anything in it is touched. A missing
    # one is created by the first look. When it is there, the first rename
    # comes before the clocks and the loop below, which only a busy lock
    # needs.
    if (_check_dir($step, $p, $o)) {
        my ($what, @r) = _round($step, $p, $o, 0, 1);
        return @r if $what eq 'acquired';
        $first = 0;
    }
    my $start = _steady_us();
    my $deadline = defined $o->{wait_us} ? $start + $o->{wait_us} : undef;
    my ($delay, $last_look, $reason) = ($BACKOFF_MIN_US, undef, undef);
    while (1) {
        my $now = _steady_us();
        my $final = defined $deadline && $now >= $deadline;
        my $look = $first || $final || !defined $last_look || $now - $last_look >= $LOOK_EVERY_US;
        $last_look = $now if $look;
        my ($what, @r) = _round($step, $p, $o, $look, $first);
        $first = 0;
        return @r if $what eq 'acquired';
        next if $what eq 'again';
        $reason = $r[0] if defined $r[0];
        my $why = 'the lock is ' . (defined $reason ? $reason : 'changing hands too fast to see who holds it');
        die _lock_error('busy', 'acquire', $p->{dir}, $why) if defined $o->{wait_us} && $o->{wait_us} == 0;
        if ($final) {
            die _lock_error('timed_out', 'acquire', $p->{dir},
                'timed out after ' . int($o->{wait_us} / 1000) . " ms; $why");
        }
        my $pause = $delay * (0.75 + rand(0.5));
        $pause = $deadline - _steady_us() if defined $deadline && _steady_us() + $pause > $deadline;
        _sleep_us(int $pause);
        $delay *= 2;
        $delay = $BACKOFF_MAX_US if $delay > $BACKOFF_MAX_US;
    }
}

# ---------------------------------------------------------------------------
# The lock

sub _acquire {
    my ($class, $step, $lockdir, %opts) = @_;
    _check_opts($step, \%opts, qw(wait lease legacy_timeout group));
    _path_arg($step, 'the lock directory', $lockdir);
    my %o = (wait_us => 10_000_000, lease_us => $DEFAULT_LEASE * 1_000_000,
        legacy_timeout_us => $DEFAULT_LEGACY_TIMEOUT * 1_000_000, group => _named_group($step, $opts{group}));
    if (%opts) {
        my $wait = defined $opts{wait} ? $opts{wait} : 10;
        $o{wait_us} = $wait eq 'forever' ? undef : int(_seconds($step, 'wait', $wait, 1) * 1_000_000);
        $o{lease_us} = _lease_us($step, $opts{lease});
        $o{legacy_timeout_us} = int(1_000_000 * _seconds($step, 'legacy_timeout', $opts{legacy_timeout}, 0))
          if defined $opts{legacy_timeout};
    }
    my ($token, $expiry, $marked) = _native_acquire($step, $lockdir, \%o);
    # A lock directory this process just made was not judged: its group.
    if (!exists $o{chosen}) {
        my @st = lstat _lock_paths($step, $lockdir)->{dir};
        $o{chosen} = _chosen_group($step, $o{group}, @st ? \@st : undef);
    }
    my $lock = bless {
        lockdir => $lockdir,
        group   => $o{group},
        chosen  => $o{chosen},
        token   => $token,
        expiry  => $expiry,
        marked  => $marked,
        lease_us => $o{lease_us},
        pid     => $$,
        held    => 1,
        command => $opts{command},
    }, ref($class) || $class;
    _held_until_signal($lock);
    return $lock;
}

# ---------------------------------------------------------------------------
# SIGTERM, SIGINT and SIGHUP end a process without its destructors or END
# blocks, so its locks would stay held until taken over: at once by a
# process on this host that sees the owner dead, only after the lease
# elsewhere. While the handler of one of them is the default, the module's
# releases the locks this process holds, then lets the signal end the
# process as it would have. A handler of the program's own is left alone.

my %HELD;              # refaddr => the lock object, weakly
my $SIGNALS_PID = 0;   # the process that looked at the handlers
my @STOP_SIGNALS = qw(TERM INT HUP);

sub _held_until_signal {
    my ($lock) = @_;
    require Scalar::Util;
    my $id = $lock->{id} = Scalar::Util::refaddr($lock);
    Scalar::Util::weaken($HELD{$id} = $lock);
    return if $SIGNALS_PID == $$;
    $SIGNALS_PID = $$;
    for my $sig (@STOP_SIGNALS) {
        my $h = $SIG{$sig};
        $SIG{$sig} = \&_on_stop_signal if !defined $h || $h eq '' || $h eq 'DEFAULT';
    }
}

sub _on_stop_signal {
    my ($sig) = @_;
    for my $lock (grep { defined } values %HELD) {
        next unless $lock->{held} && $lock->{pid} == $$;
        local ($@, $!, $?);
        eval { $lock->release; 1 };
    }
    # Blocked while its handler runs, the signal raised again is delivered
    # on return, with the default action: the process ends by it.
    $SIG{$sig} = 'DEFAULT';
    kill $sig, $$;
}

# A lease in microseconds: more than 0, at most the protocol's 24 hours,
# which every process judges a longer one implausible beyond.
sub _lease_us {
    my ($step, $lease) = @_;
    return $DEFAULT_LEASE * 1_000_000 unless defined $lease;
    # It goes into the token's name, which rename would refuse under perl -T.
    _untainted($step, 'lease', $lease);
    my $us = int(_seconds($step, 'lease', $lease, 0) * 1_000_000);
    _usage($step, 'lease must be at least a microsecond') if $us <= 0;
    _usage($step, 'lease must not exceed 24 hours (the protocol\'s maximum lease): every process judges a '
          . 'longer one implausible and takes the lock over')
      if $us > $MAX_LEASE_US;
    return $us;
}

sub acquire {
    my ($class, $lockdir, %opts) = @_;
    return $class->_acquire('acquire', $lockdir, %opts);
}

sub try_acquire {
    my ($class, $lockdir, %opts) = @_;
    $opts{wait} = 0 unless defined $opts{wait};
    my $lock = eval { $class->_acquire('acquire', $lockdir, %opts) };
    return $lock if $lock;
    my $err = $@;
    return undef if ref $err && ($err->code eq 'busy' || $err->code eq 'timed_out');
    die $err;
}

sub token   { $_[0]{token} }
sub lockdir { $_[0]{lockdir} }
sub held    { $_[0]{held} && $_[0]{pid} == $$ ? 1 : 0 }

sub _owned {
    my ($self, $step) = @_;
    my $why = !$self->{held} ? 'this lock object no longer holds the lock (it was released or lost)'
      : $self->{pid} != $$ ? "the lock belongs to process $self->{pid}, and this is its forked child $$"
      : undef;
    my $what = defined $self->{what} ? $self->{what} : $self->{lockdir};
    die _error(code => 'not_owner', message => "Tokenlock: $step $what: $why") if defined $why;
}

sub _opts { my $self = shift; return defined $self->{command} ? { command => $self->{command} } : {} }

sub refresh {
    my ($self, %opts) = @_;
    _check_opts('refresh', \%opts, qw(lease));
    $self->_owned('refresh');
    return $self->_refresh(_lease_us('refresh', $opts{lease}));
}

sub _refresh {
    my ($self, $lease_us) = @_;
    my $p = _lock_paths('refresh', $self->{lockdir});
    my $old = $self->{token};
    my $expiry = _now_us() + $lease_us;
    # The owner part stays; the new expiry makes the name new, so that a
    # taker that judged the old name finds it gone.
    (my $owner = $old) =~ s/\Alockfile\.[0-9]+\.//;
    my $next = "lockfile.$expiry.$owner";
    if (!rename("$p->{dir}/$old", "$p->{dir}/$next")) {
        my $errno = $! + 0;
        if ($!{ENOENT}) {
            # An NFS client may retransmit a rename whose reply was lost.
            if (!lstat "$p->{dir}/$next") {
                $self->{held} = 0;
                die $self->_lost('refresh');
            }
        }
        else {
            die _system_error('refresh', $p->{dir}, "cannot rename $old to $next", $errno);
        }
    }
    $self->{token}    = $next;
    $self->{expiry}   = $expiry;
    $self->{lease_us} = $lease_us;
    # The mark names the current lease: one naming the old lease would look
    # expired to a process judging it after that lease's end.
    if ($self->{marked}) {
        my $path = "$p->{dir}/$next";
        if (!rename("$path/" . _mark_of($old), "$path/" . _mark_of($next))
            && !($!{ENOENT} && (mkdir("$path/" . _mark_of($next), 0700) || $!{EEXIST})))
        {
            die _system_error('refresh', $p->{dir},
                "the lease was renewed, but our owner mark in $next could not be renamed to match (until a "
                  . 'refresh succeeds, another GlusterFS client may judge it expired at the old lease\'s end)', $! + 0);
        }
    }
    return $next;
}

sub _lost {
    my ($self, $step) = @_;
    return _lock_error('lock_lost', $step, $self->{lockdir},
        "the lock does not hold our token $self->{token} any more: it was taken over by another process "
          . '(our lease ended at ' . _utc($self->{expiry})
          . ', or our process was judged dead); the new owner\'s lock was left alone');
}

sub release {
    my ($self) = @_;
    $self->_owned('release');
    my $p = _lock_paths('release', $self->{lockdir});
    my $path = "$p->{dir}/$self->{token}";
    my $mark = $self->{marked} ? "$path/" . _mark_of($self->{token}) : undef;
    # The next holder of "lockfile" would find our mark and step back.
    if ($self->{marked} && !rmdir($mark) && !$!{ENOENT}) {
        die _system_error('release', $p->{dir}, "cannot remove our owner mark from $self->{token} (the lock is still ours)", $! + 0);
    }
    # Never retried after ENOENT: on GlusterFS a rename through a stale
    # name can move the token of whoever took ours over.
    if (rename($path, "$p->{dir}/$FREE")) {
        $self->{held} = 0;
        delete $HELD{ $self->{id} } if defined $self->{id};
        return 1;
    }
    my $errno = $! + 0;
    if ($!{ENOENT}) {
        $self->{held} = 0;
        die $self->_lost('release');
    }
    # Still ours: the caller may retry, and DESTROY will. Held without its
    # mark, another client's rename through a stale name could take it.
    my $err = _system_error('release', $p->{dir}, "cannot rename $self->{token} to lockfile", $errno);
    if ($self->{marked} && !mkdir($mark, 0700) && !$!{EEXIST}) {
        $err->{message} .= "; and our owner mark could not be put back ($!): until the release succeeds, "
          . 'another GlusterFS client may take the lock too';
    }
    die $err;
}

sub DESTROY {
    my ($self) = @_;
    delete $HELD{ $self->{id} } if defined $self->{id} && $self->{pid} == $$;
    return unless $self->{held} && $self->{pid} == $$;
    # Running the command must not change what the code around us sees,
    # least of all the exit status of a program that is ending.
    local ($@, $!, $?);
    eval { $self->release; 1 }
      or warn "Tokenlock: the lock $self->{lockdir} was still held when its object went away, "
      . "and releasing it failed: $@";
}

# An interpreter thread shares the process: its copy must never release.
sub CLONE_SKIP { 1 }

sub with_lock {
    my ($lockdir, $code, %opts) = @_;
    _usage('with_lock', 'the second argument must be a code reference') unless ref $code eq 'CODE';
    my $lock = Tokenlock->_acquire('acquire', $lockdir, %opts);
    return _run_held($lock, $code, wantarray, $lockdir);
}

# Runs $code($lock) in the context $want and releases the lock however it
# ends: the code's error comes out, or, after it returned, a lost lock.
sub _run_held {
    my ($lock, $code, $want, $what) = @_;
    my @r;
    my $ok = eval {
        if ($want) { @r = $code->($lock) }
        elsif (defined $want) { $r[0] = $code->($lock) }
        else { $code->($lock) }
        1;
    };
    if (!$ok) {
        my $err = $@;
        $err = "Tokenlock: with_lock $what: the code died with an empty message\n"
          unless ref $err || length $err;
        if ($lock->held) {
            # The code's own error matters more; a lost lock is still said.
            eval { $lock->release; 1 } or warn $@;
        }
        die $err;
    }
    # Also after the code released or refreshed it through $lock itself.
    # A lost lock dies here: another process may have run the critical
    # section at the same time, and the caller has to know.
    $lock->release if $lock->held;
    return $want ? @r : $r[0];
}

# ---------------------------------------------------------------------------
# Files, natively: the atomic write and the fenced update of
# docs/atomic-writes.md.

# The largest file an update reads (default_read_limit), and the largest
# counter file (counter_max_bytes).
my $READ_LIMIT = 64 * 1024 * 1024;
my $COUNTER_LIMIT = 64;

# How long a stale read on a network filesystem is read again. Tests
# shorten it.
our $STALE_READ_BUDGET_US = 3_000_000;

my %LOCAL_FS = map { $_ => 1 } qw(ext2 ext3 ext4 xfs btrfs tmpfs ramfs f2fs overlay zfs reiserfs jfs bcachefs nilfs2);

# Whether $path is on a local filesystem; unknown counts as local, as the
# library's updater counts it. Tests set %LOCAL_FOR to play a network
# filesystem on a local disk.
our %LOCAL_FOR;

# Asked once per lock directory and process: a mount table can be long.
my %LOCAL_SEEN;

sub _on_local_fs {
    my ($path) = @_;
    return $LOCAL_FOR{$path} if defined $LOCAL_FOR{$path};
    return $LOCAL_SEEN{$path} if defined $LOCAL_SEEN{$path};
    my $type = _fs_type($path);
    return $LOCAL_SEEN{$path} = !defined $type || $LOCAL_FS{$type} ? 1 : 0;
}

sub _file_advice {
    my ($errno, $dir) = @_;
    local $! = $errno;
    return "check the permissions of $dir: this process (uid $>) must be able to write and search it"
      if $!{EACCES} || $!{EPERM};
    return 'the directory of the file must exist' if $!{ENOENT};
    return "the filesystem of $dir is full or over quota: free space" if $!{ENOSPC} || $!{EDQUOT};
    return "the filesystem of $dir is mounted read-only" if $!{EROFS};
    return '';
}

sub _file_error {
    my ($step, $t, $what, $errno) = @_;
    return _system_error($step, $t->{path}, $what, $errno, _file_advice($errno, $t->{dir}));
}

# The target of a write: its path, directory and name, and what a
# replacement keeps (the mode of a regular file it replaces). A directory
# or a special file is refused. A symbolic link is replaced, as if the
# name were free, unless $follow: then the chain of links is resolved (at
# most 40 hops), each link checked as the kernel's protected_symlinks
# checks it, and the file it ends at is the target.
sub _resolve_target {
    my ($step, $path, $follow) = @_;
    my $bad = sub { die _error(code => 'bad_argument', status => 64, message => "tokenlock: $step \"$path\": $_[0]") };
    $bad->("the target path ends in '/': name a file") if $path =~ m{/\z};
    my $t;
    for (my $hops = 0;; $hops++) {
        my ($dir, $name) = $path =~ m{\A(.*)/([^/]*)\z}s ? ($1, $2) : ('.', $path);
        $dir = '/' if $dir eq '';
        $bad->('the target must name a file') if $name eq '.' || $name eq '..';
        $t = { path => $path, dir => $dir, name => $name, exists => 0 };
        my @st = lstat $path;
        if (!@st) {
            die _file_error($step, $t, 'cannot look at the target', $! + 0) unless $!{ENOENT};
            last;
        }
        if (Fcntl::S_ISLNK($st[2])) {
            last unless $follow;
            die _file_error($step, $t, 'too many levels of symbolic links', POSIX::ELOOP()) if $hops >= 40;
            _check_link($step, $t, \@st);
            my $to = readlink $path;
            die _file_error($step, $t, 'cannot read the symbolic link', $! + 0) unless defined $to;
            $path = $to =~ m{\A/} ? $to : "$dir/$to";
            next;
        }
        die _file_error($step, $t, 'the target is a directory', POSIX::EISDIR()) if Fcntl::S_ISDIR($st[2]);
        die _system_error($step, $t->{path},
            'the target is not a regular file (a device, FIFO or socket cannot be replaced atomically)', POSIX::EINVAL(), '')
          unless Fcntl::S_ISREG($st[2]);
        $t->{exists} = 1;
        # Its setuid, setgid and sticky bits belonged to its contents.
        $t->{keep_mode} = $st[2] & 0777;
        $t->{keep_owner} = [$st[4], $st[5]];
        last;
    }
    my @dst = stat $t->{dir};
    if (!@dst) {
        my $errno = $! + 0;
        die _system_error($step, $t->{path}, "its directory $t->{dir} does not exist", $errno, 'create the directory first')
          if $!{ENOENT};
        die _file_error($step, $t, "cannot look at the directory $t->{dir}", $errno);
    }
    die _file_error($step, $t, "$t->{dir} is not a directory", POSIX::ENOTDIR()) unless Fcntl::S_ISDIR($dst[2]);
    # Its filesystem: a fenced commit needs the lock's token on the same one.
    $t->{dir_dev} = $dst[0];
    return $t;
}

# In a directory that is sticky and writable by all, anyone may plant a
# link: one is followed only when it is ours or the directory owner's.
sub _check_link {
    my ($step, $t, $link_st) = @_;
    my @d = stat $t->{dir};
    die _file_error($step, $t, "cannot look at the directory $t->{dir} of the symbolic link", $! + 0) unless @d;
    return unless ($d[2] & 01000) && ($d[2] & 0002);
    return if $link_st->[4] == $> || $link_st->[4] == $d[4];
    die _error(code => 'untrusted', status => 77,
        message => "tokenlock: $step $t->{path}: refusing to follow the symbolic link $t->{path}: it is owned by uid "
          . "$link_st->[4], neither this user (uid $>) nor the owner of $t->{dir} (uid $d[4]), a directory that is sticky "
          . sprintf('and writable by all (mode %04o), where anyone may plant a link; nothing was written or read: ', $d[2] & 07777)
          . "name the file it points to directly, or have that link removed and made by uid $>"
          . ($> == $d[4] ? '' : " or $d[4]"));
}

sub _umask_mode { my $u = umask; return 0644 & ~(defined $u ? $u : 022) }

# Writes $data to a new temporary file .NAME.tmp.<16 hex> in $in_dir,
# flushed as $sync asks; returns its path. On failure nothing is left.
sub _write_temp {
    my ($t, $in_dir, $data, $sync, $mode) = @_;
    my $tmp = "$in_dir/.$t->{name}.tmp." . _nonce();
    my $fh;
    # O_EXCL and O_NOFOLLOW: a link planted under that name cannot
    # redirect the write.
    if (!sysopen($fh, $tmp, Fcntl::O_WRONLY() | Fcntl::O_CREAT() | Fcntl::O_EXCL() | (eval { Fcntl::O_NOFOLLOW() } || 0), 0600)) {
        die _file_error('create', $t, "cannot create the temporary file $tmp", $! + 0);
    }
    binmode $fh;
    my $fail;
    # As root, the replaced file's owner and group are kept (best effort),
    # so that the program owning the data can still write it.
    chown($t->{keep_owner}[0], $t->{keep_owner}[1], $fh) if $> == 0 && $t->{keep_owner};
    if (!chmod($mode, $fh)) { $fail = ['create', "cannot set the mode of the temporary file $tmp", $! + 0] }
    else {
        my $off = 0;
        while ($off < length $data) {
            my $w = syswrite($fh, $data, length($data) - $off, $off);
            if (!defined $w) {
                next if $!{EINTR};
                $fail = ['write', "cannot write the temporary file $tmp", $! + 0];
                last;
            }
            $off += $w;
        }
    }
    if (!$fail && $sync ne 'none' && !$fh->sync) { $fail = ['sync', "cannot flush the temporary file $tmp", $! + 0] }
    # A failure here counts: NFS reports write errors at close.
    if (!close($fh) && !$fail) { $fail = ['close', "closing the temporary file $tmp failed", $! + 0] }
    if ($fail) {
        unlink $tmp;
        die _file_error($fail->[0], $t, $fail->[1], $fail->[2]);
    }
    return $tmp;
}

sub _sync_target_dir {
    my ($t, $sync, $done, $advice, $value) = @_;
    return if $sync ne 'file_and_dir';
    return if _fsync_dir($t->{dir});
    my $cause = "$!";
    my $what = "$done, but flushing the directory $t->{dir} failed ($cause): a crash may undo it$advice";
    $what .= "; give this user read permission on $t->{dir} (chmod u+r, or g+r for a shared group), or write with sync file"
      if $!{EACCES} || $!{EPERM};
    die _error(code => 'dir_sync_failed', status => 74, value => $value, message => "tokenlock: sync $t->{path}: $what");
}

sub _mode_of {
    my ($t, $mode) = @_;
    # Checked by write_file: untainted here, since chmod refuses a tainted mode.
    return oct(($mode =~ /\A(0[0-7]{1,4})\z/)[0]) if defined $mode;
    return defined $t->{keep_mode} ? $t->{keep_mode} : _umask_mode();
}

# write_file without a lock: temp beside the target, renamed over it.
sub _native_write {
    my ($path, $data, $sync, $mode, $follow) = @_;
    my $t = _resolve_target('write', $path, $follow);
    my $tmp = _write_temp($t, $t->{dir}, $data, $sync, _mode_of($t, $mode));
    if (!rename($tmp, $t->{path})) {
        my $errno = $! + 0;
        unlink $tmp;
        die _file_error('rename', $t, "cannot rename $tmp over the target", $errno);
    }
    _sync_target_dir($t, $sync, 'the new contents are in place', '');
    return 1;
}

# Reads the target under the lock: regular files only, at most the read
# limit, never through a symbolic link (the commit replaces a link, so
# what it points to is not the target's contents). Returns (contents or
# undef when missing, the open handle, its mtime in microseconds).
sub _read_target {
    my ($t, $counter) = @_;
    # A counter holds at most 64 bytes (docs/security.md): more is not read.
    my $limit = $counter ? $COUNTER_LIMIT : $READ_LIMIT;
    my $fh;
    if (!sysopen($fh, $t->{path}, Fcntl::O_RDONLY() | Fcntl::O_NONBLOCK() | (eval { Fcntl::O_NOFOLLOW() } || 0))) {
        return (undef) if $!{ENOENT};
        die _system_error('read', $t->{path},
            'it is a symbolic link, and links are not followed here (the write replaces the link), so what it '
              . 'points to, maybe another user\'s file, was not read; nothing was written: name the file it points to, '
              . 'ask to follow links, or remove the link', POSIX::ELOOP(), '')
          if $!{ELOOP};
        die _file_error('read', $t, 'cannot open the target', $! + 0);
    }
    # Reading does not change the modification time, which the version
    # mark compares: one stat serves both.
    require Time::HiRes;
    my @st = Time::HiRes::stat($fh);
    die _system_error('read', $t->{path}, 'it is a directory; nothing was written', POSIX::EISDIR(), '')
      if Fcntl::S_ISDIR($st[2]);
    die _system_error('read', $t->{path},
        'it is not a regular file (a FIFO, device or socket), and was not read; nothing was written: put a regular file there',
        POSIX::EINVAL(), '')
      unless Fcntl::S_ISREG($st[2]);
    die _counter_too_large($t->{path}, $st[7]) if $counter && $st[7] > $limit;
    die _system_error('read', $t->{path}, "it is too large ($st[7] bytes, the limit is $READ_LIMIT); nothing was written",
        POSIX::EFBIG(), '')
      if $st[7] > $limit;
    binmode $fh;
    my $text = '';
    while (1) {
        my $r = sysread($fh, $text, $counter ? $limit + 1 - length $text : 65536, length $text);
        if (!defined $r) {
            next if $!{EINTR};
            die _file_error('read', $t, 'cannot read the target', $! + 0);
        }
        last if $r == 0;
        die _counter_too_large($t->{path}, length $text) if $counter && length $text > $limit;
        die _system_error('read', $t->{path}, "it grew past the limit of $READ_LIMIT bytes; nothing was written",
            POSIX::EFBIG(), '')
          if length $text > $limit;
    }
    return ($text, $fh, int(($st[9] || 0) * 1_000_000));
}

# ---- version marks, on network filesystems ---------------------------------
# `D/<token>/w/v.<FNV-1a hash of the contents>.<mtime of the new file, µs>`:
# what the last commit wrote, so that the next holder can tell a stale read
# from its client's cache (docs/atomic-writes.md, The version mark).

sub _fnv_hex { my ($hi, $lo) = _fnv1a($_[0]); return (sprintf('%08x%08x', $hi, $lo) =~ /\A([0-9a-f]{16})\z/)[0] }

sub _read_version_mark {
    my ($workspace) = @_;
    opendir(my $dh, $workspace) or return undef;
    my $best;
    for my $n (_names($dh)) {
        next unless $n =~ /\Av\.([0-9a-f]{16})\.(-?[0-9]+)\z/;
        $best = { name => $n, hash => $1, mtime_us => $2 } if !$best || $2 > $best->{mtime_us};
    }
    closedir $dh;
    return $best;
}

sub _write_version_mark {
    my ($workspace, $old, $hash, $mtime_us) = @_;
    my $name = "v.$hash.$mtime_us";
    return if $old && $old->{name} eq $name;
    return if $old && rename("$workspace/$old->{name}", "$workspace/$name");
    if (sysopen(my $fh, "$workspace/$name", Fcntl::O_WRONLY() | Fcntl::O_CREAT() | Fcntl::O_EXCL(), 0644)) { close $fh }
}

# ---- the fenced update ------------------------------------------------------

sub _lost_before_commit {
    my ($t, $token) = @_;
    return _error(code => 'lock_lost', status => 3,
        message => "tokenlock: commit $t->{path}: the lock was taken over before the commit (our token $token is "
          . 'gone: our lease ended or we were judged dead); nothing was written and the new owner\'s data is intact');
}

# Whether our token is gone: a lookup's ENOENT is confirmed by a listing,
# since a network client may answer a lookup from a stale cache.
# ESTALE counts as ENOENT here: a GlusterFS client that still has a token
# cached that a takeover moved answers with it.
sub _missing { return $!{ENOENT} || $!{ESTALE} }

# A lookup that finds the token is checked against a listing too: an sshfs
# client keeps a renamed name in its entry cache. Only failed steps ask.
sub _token_gone {
    my ($lock) = @_;
    my $found = lstat("$lock->{lockdir}/$lock->{token}") ? 1 : 0;
    return 0 if !$found && !_missing();
    opendir(my $dh, $lock->{lockdir}) or return !$found;
    my $there = grep { $_ eq $lock->{token} } _names($dh);
    closedir $dh;
    return !$there;
}

# The token's workspace `w`, made by the first update, judged by the trust
# rules: another user who could write it could swap the temporary file.
# Returns (path, made).
sub _workspace {
    my ($lock, $t, $tok) = @_;
    my $token_path = "$lock->{lockdir}/$lock->{token}";
    my $w = "$token_path/w";
    my $made = 0;
    my @st = lstat $w;
    if (!@st && $!{ENOENT}) {
        if (mkdir($w, 0700)) {
            $made = 1;
            chmod(_shared_mode(_dir_mode('commit') | (defined $lock->{group} ? 0070 : 0), undef, $w, $lock->{chosen}), $w);
        }
        elsif (!$!{EEXIST}) {
            die _lost_before_commit($t, $lock->{token}) if _missing() && _token_gone($lock);
            die _file_error('create', $t, "cannot create the workspace $w", $! + 0);
        }
        @st = lstat $w;
    }
    die _file_error('commit', $t, "cannot look at the workspace $w", $! + 0) unless @st;
    for my $d ([$token_path, "lock's token", $tok], [$w, "lock's workspace", \@st]) {
        my ($path, $what, $s) = @$d;
        next unless @$s;
        my $why = !Fcntl::S_ISDIR($s->[2]) || Fcntl::S_ISLNK($s->[2]) ? 'it is not a directory; remove it'
          : _distrust($path, $s->[2], $s->[4], $s->[5], $lock->{chosen}, defined $lock->{group}, 0);
        if (defined $why) {
            rmdir $w if $made;
            die _lock_error('untrusted', 'commit', $path,
                sprintf('refusing the %s (owner uid %d, mode %04o; this process runs as uid %d): another user could '
                      . 'plant or swap entries in it, and nothing in it was touched; %s', $what, $s->[4], $s->[2] & 07777, $>, $why));
        }
    }
    return ($w, $made);
}

# Commits $data over the target through the token: the temporary file in
# D/<token>/w, renamed over the target by a path that runs through the
# token's name, so that it fails once the lock was taken over. Returns 1,
# or 0 (nothing written) when the token cannot fence it: a file token, or
# the target on another filesystem.
sub _fenced_commit {
    my ($lock, $t, $data, $sync, $mode, $mark) = @_;
    my $token_path = "$lock->{lockdir}/$lock->{token}";
    my @tok = lstat $token_path;
    if (!@tok) {
        die _lost_before_commit($t, $lock->{token}) if _missing() && _token_gone($lock);
        die _file_error('commit', $t, "cannot look at the lock's token $token_path", $! + 0);
    }
    # A token that is a file, as a legacy script's setup may have made it,
    # has no room for the temporary file.
    # A link there is refused by the workspace's checks.
    return 0 if (!Fcntl::S_ISDIR($tok[2]) && !Fcntl::S_ISLNK($tok[2])) || $tok[0] != $t->{dir_dev};
    my ($w, $made) = _workspace($lock, $t, \@tok);
    my $tmp = eval { _write_temp($t, $w, $data, $sync, $mode) };
    if (!defined $tmp) {
        my $err = $@;
        rmdir $w if $made;
        die _lost_before_commit($t, $lock->{token}) if ref $err && ($err->errno == POSIX::ENOENT() || $err->errno == POSIX::ESTALE()) && _token_gone($lock);
        die $err;
    }
    require Time::HiRes;
    my @written = $mark ? Time::HiRes::lstat($tmp) : ();
    if (!rename($tmp, $t->{path})) {
        my $errno = $! + 0;
        my $exdev = $!{EXDEV};
        unlink $tmp;
        rmdir $w if $made;
        return 0 if $exdev;
        local $! = $errno;
        # Made through the token's name a moment ago: a rename that no
        # longer finds it, into a directory that is there, lost the token
        # (an sshfs client may still find the old name in its caches).
        die _lost_before_commit($t, $lock->{token}) if _missing() && (_token_gone($lock) || -d $t->{dir});
        die _file_error('rename', $t, "cannot rename $tmp over the target", $errno);
    }
    _write_version_mark($w, $mark->{old}, _fnv_hex($data), int($written[9] * 1_000_000)) if $mark && @written;
    return 1;
}

# The update flow of update_file: lock, read, compute, commit through the
# token, release, flush the directory. $compute gets the current contents
# (undef: missing) and returns the new ones, or dies. Returns what
# $compute returned as its second value.
sub _native_update {
    my ($step, $path, $lockdir, $compute, %o) = @_;
    my $t;
    my $wait = defined $o{wait} ? $o{wait} : 10;
    my $lock = Tokenlock->_acquire('acquire', $lockdir, wait => $wait,
        (defined $o{legacy_timeout} ? (legacy_timeout => $o{legacy_timeout}) : ()),
        (defined $o{lease} ? (lease => $o{lease}) : ()), (defined $o{group} ? (group => $o{group}) : ()));
    my ($value, $fh);
    my $ok = eval {
        $t = _resolve_target('write', $path, $o{follow_symlinks});
        _sweep_temps($t, $lock->{lease_us}) if int(rand(32)) == 0;
        my $network = !_on_local_fs($lock->{lockdir});
        my $mark = $network ? { old => _read_version_mark("$lock->{lockdir}/$lock->{token}/w") } : undef;
        my ($current, $mtime);
        ($current, $fh, $mtime) = _read_target($t, $o{counter});
        if ($mark && $mark->{old}) {
            # A stale read: older than what the last commit wrote.
            my $start = _steady_us();
            my $budget = $STALE_READ_BUDGET_US;
            $budget = $lock->{lease_us} / 4 if $lock->{lease_us} / 4 < $budget;
            my ($pause, $reads) = (5000, 1);
            # One version, read for the whole wait and newer than the mark
            # though within the skew: written outside the lock just after
            # the last commit (a stale cache serves an older one).
            my $first = defined $current ? _fnv_hex($current) : undef;
            my $one_version = defined $first;
            while (!(defined $current && _fnv_hex($current) eq $mark->{old}{hash})
                && !(defined $current && $mtime > $mark->{old}{mtime_us} + $SKEW_US))
            {
                my $left = $start + $budget - _steady_us();
                last if $left <= 0 && $one_version && $mtime > $mark->{old}{mtime_us};
                die _error(code => 'stale_data', status => 75,
                    message => "tokenlock: read $t->{path}: this client keeps reading a version older than the one the "
                      . "last update committed ($reads reads in " . int((_steady_us() - $start) / 1000)
                      . ' ms); nothing was written; the filesystem (' . (_fs_type($t->{dir}) || 'a network filesystem')
                      . ') serves stale cached data: turn its client caches off (tokenlock doctor DIR --peer DIR2 checks a mount)')
                  if $left <= 0;
                _sleep_us($pause < $left ? $pause : $left);
                $pause = $pause * 2 > 200_000 ? 200_000 : $pause * 2;
                close $fh if $fh;
                ($current, $fh, $mtime) = _read_target($t, $o{counter});
                $reads++;
                $one_version = 0 unless defined $current && defined $first && _fnv_hex($current) eq $first;
            }
        }
        my $next;
        ($next, $value) = $compute->($current);
        my $mode = _mode_of($t, $o{mode});
        my $sync = $o{sync};
        if (!_fenced_commit($lock, $t, $next, $sync, $mode, $mark)) {
            # Across filesystems: beside the target, ownership proved by a
            # refresh rename just before the commit. The window between the
            # two remains.
            my $tmp = _write_temp($t, $t->{dir}, $next, $sync, $mode);
            my $token = $lock->{token};
            if (!eval { $lock->_refresh($lock->{lease_us}); 1 }) {
                my $err = $@;
                unlink $tmp;
                die(ref $err && $err->code eq 'lock_lost' ? _lost_before_commit($t, $token) : $err);
            }
            if (!rename($tmp, $t->{path})) {
                my $errno = $! + 0;
                unlink $tmp;
                die _file_error('rename', $t, "cannot rename $tmp over the target", $errno);
            }
        }
        1;
    };
    my $err = $@;
    # Released whatever happened; after a commit a failure to release is
    # not reported, which would invite a retry that counts twice.
    eval { $lock->release if $lock->held; 1 };
    # The replaced version is closed last: its close frees its blocks.
    close $fh if $fh;
    die $err unless $ok;
    _sync_target_dir($t, $o{sync}, 'the update is committed', '; do not repeat the update', $value);
    return $value;
}

# Removes this target's temporary files older than a lease, which no live
# writer holding the lock can own: those of crashed writes beside it.
# Only regular files named exactly .NAME.tmp.<16 hex>.
sub _sweep_temps {
    my ($t, $lease_us) = @_;
    opendir(my $dh, $t->{dir}) or return 0;
    my $prefix = ".$t->{name}.tmp.";
    my @names = grep { substr($_, 0, length $prefix) eq $prefix && substr($_, length $prefix) =~ /\A[0-9a-f]{16}\z/ } _names($dh);
    closedir $dh;
    my $removed = 0;
    for my $n (@names) {
        my @st = lstat "$t->{dir}/$n" or next;
        next unless Fcntl::S_ISREG($st[2]) && $st[9] * 1_000_000 < _now_us() - $lease_us;
        $removed += unlink "$t->{dir}/$n";
    }
    return $removed;
}

# Adds two unsigned decimals given as strings; undef past 2**64-1.
sub _add_u64 {
    my ($a, $b) = @_;
    my ($r, $carry) = ('', 0);
    my ($i, $j) = (length($a) - 1, length($b) - 1);
    while ($i >= 0 || $j >= 0 || $carry) {
        my $s = $carry + ($i >= 0 ? substr($a, $i--, 1) : 0) + ($j >= 0 ? substr($b, $j--, 1) : 0);
        $r = ($s % 10) . $r;
        $carry = $s >= 10 ? 1 : 0;
    }
    $r =~ s/\A0+(?=\d)//;
    return undef if length $r > 20 || (length $r == 20 && $r gt '18446744073709551615');
    return $r;
}

sub _counter_too_large {
    my ($path, $size) = @_;
    return _error(
        code    => 'corrupt_data',
        status  => 65,
        message => "tokenlock: read counter $path: the file holds $size bytes, more than the $COUNTER_LIMIT a counter "
          . 'holds; it was not read, nothing was written and it was left as it is: repair or remove it by hand',
    );
}

sub _corrupt_counter {
    my ($path, $text) = @_;
    my $shown = substr($text, 0, 24);
    $shown =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge;
    $shown .= '...' if length $text > 24;
    return _error(
        code    => 'corrupt_data',
        status  => 65,
        message => "tokenlock: read counter $path: the file does not hold one unsigned decimal and a newline "
          . "(it holds \"$shown\", " . length($text) . ' bytes); it was left as it is: repair or remove it by hand',
    );
}

# ---------------------------------------------------------------------------
# Files

sub write_file {
    my ($path, $data, %opts) = @_;
    my $step = 'write';
    _check_opts($step, \%opts, qw(sync lock wait legacy_timeout mode follow_symlinks group));
    _path_arg($step, 'the file', $path);
    _usage("$step $path", 'the data is undef; pass "" to write an empty file') unless defined $data;
    my $bytes = "$data";
    _usage("$step $path", 'the data holds characters above 255; encode it first (Encode::encode_utf8)')
      unless utf8::downgrade($bytes, 1);
    # The data is complete in memory, so empty data is meant: the command's
    # guard against a failed producer does not apply.
    my @args = ('write', '--allow-empty', '--sync', _sync($step, $opts{sync}));
    push @args, '--lock', _arg_path(_path_arg($step, 'lock', $opts{lock})) if defined $opts{lock};
    if (defined $opts{mode}) {
        # A number such as 0640 arrives here as 416: refused rather than
        # guessed, since its digits would also read as an octal mode.
        _usage("$step $path", "mode must be a string of octal digits such as '0640', not \"$opts{mode}\"")
          unless $opts{mode} =~ /^0[0-7]{1,4}\z/;
        push @args, '--mode', $opts{mode};
    }
    push @args, '--follow-symlinks' if $opts{follow_symlinks};
    push @args, _legacy_timeout($step, \%opts), _group_args($step, \%opts);
    if (defined $opts{wait}) {
        _usage("$step $path", 'wait applies to the lock: give lock too') unless defined $opts{lock};
        _seconds($step, 'wait', $opts{wait}, 1);
    }
    if (!defined $opts{command}) {
        _native_setup();
        my $sync = _sync($step, $opts{sync});
        return _native_write($path, $bytes, $sync, $opts{mode}, $opts{follow_symlinks}) unless defined $opts{lock};
        _native_update($step, $path, $opts{lock}, sub { ($bytes) }, %opts, sync => $sync);
        return 1;
    }
    _call_waiting({ step => $step, path => $path, opts => \%opts, stdin => $bytes, busy => 'timed_out' },
        $opts{wait}, @args, _arg_path($path));
    return 1;
}

# Read-modify-write under the lock, committed through the token: $code
# gets the current contents (undef: no file) and returns the new ones.
sub update_file {
    my ($path, $code, %opts) = @_;
    my $step = 'update';
    _check_opts($step, \%opts, qw(lock wait lease sync mode legacy_timeout follow_symlinks group));
    _path_arg($step, 'the file', $path);
    _usage("$step $path", 'the second argument must be a code reference') unless ref $code eq 'CODE';
    _usage("$step $path", "mode must be a string of octal digits such as '0640', not \"$opts{mode}\"")
      if defined $opts{mode} && $opts{mode} !~ /^0[0-7]{1,4}\z/;
    _native_setup();
    my $lockdir = defined $opts{lock} ? _path_arg($step, 'lock', $opts{lock}) : "$path.lock";
    _seconds($step, 'wait', $opts{wait}, 1) if defined $opts{wait} && $opts{wait} ne 'forever';
    return _native_update($step, $path, $lockdir, sub {
        my $next = $code->($_[0]);
        die _error(code => 'bad_argument', status => 64,
            message => "Tokenlock: $step $path: the update's code returned undef; return \"\" for an empty file; "
              . 'nothing was written')
          unless defined $next;
        my $bytes = "$next";
        die _error(code => 'bad_argument', status => 64,
            message => "Tokenlock: $step $path: the update's code returned characters above 255; encode them first "
              . '(Encode::encode_utf8); nothing was written')
          unless utf8::downgrade($bytes, 1);
        return ($bytes, $bytes);
    }, %opts, sync => _sync($step, $opts{sync}));
}

sub increment {
    my ($path, %opts) = @_;
    my $step = 'incr';
    _check_opts($step, \%opts, qw(by lock sync wait legacy_timeout group));
    _path_arg($step, 'the counter file', $path);
    my $by = defined $opts{by} ? $opts{by} : 1;
    _usage("$step $path", "by must be an unsigned decimal number, not \"$by\"") unless $by =~ /^\d+\z/;
    (my $canonical = $by) =~ s/\A0+(?=\d)//;
    _usage("$step $path", "by must be at most 18446744073709551615, not \"$by\"")
      unless defined _add_u64($canonical, '0');
    if (!defined $opts{command}) {
        _native_setup();
        my $lockdir = defined $opts{lock} ? _path_arg($step, 'lock', $opts{lock}) : "$path.lock";
        _seconds($step, 'wait', $opts{wait}, 1) if defined $opts{wait};
        return _native_update($step, $path, $lockdir, sub {
            my ($text) = @_;
            my $old = '0';
            if (defined $text) {
                die _corrupt_counter($path, $text)
                  unless $text =~ /\A(0|[1-9][0-9]{0,19})\n\z/ && defined _add_u64($1, '0');
                $old = $1;
            }
            my $new = _add_u64($old, $canonical);
            die _system_error('increment', $path, "adding $canonical to $old would overflow 64 bits; the counter was left as it is",
                POSIX::EOVERFLOW(), '')
              unless defined $new;
            return ("$new\n", $new);
        }, %opts, sync => _sync($step, $opts{sync}), counter => 1);
    }
    my @args = ('incr', '--by', $by, '--sync', _sync($step, $opts{sync}));
    push @args, '--lock', _arg_path(_path_arg($step, 'lock', $opts{lock})) if defined $opts{lock};
    push @args, _legacy_timeout($step, \%opts), _group_args($step, \%opts);
    _seconds($step, 'wait', $opts{wait}, 1) if defined $opts{wait};
    my $out = eval { _call_waiting({ step => $step, path => $path, opts => \%opts, busy => 'timed_out' },
        $opts{wait}, @args, _arg_path($path)) };
    if (!defined $out) {
        my $err = $@;
        # Counted all the same: the command printed the new value.
        $err->{value} = _counter_value($err->{output}, $path)
          if ref $err && $err->code eq 'dir_sync_failed';
        die $err;
    }
    return _counter_value($out, $path);
}

# Runs write or incr (@args: the subcommand, its options, the file last)
# with the wait for its lock, if one is given, as -w before the file.
sub _call_waiting {
    my ($ctx, $wait, @args) = @_;
    my ($sub, $file) = ($args[0], $args[-1]);
    my $cmd = _find_command($ctx->{opts} || {}, $ctx->{step}, $ctx->{path});
    my $refused;
    if (defined $wait && (!defined $TAKES_WAIT{$cmd}{$sub} || $TAKES_WAIT{$cmd}{$sub})) {
        my $out = eval { _call($ctx, @args[0 .. $#args - 1], '-w', $wait, $file) };
        my $err = $@;
        if (defined $out || !(ref $err && $err->code eq 'bad_argument') || defined $TAKES_WAIT{$cmd}{$sub}) {
            $TAKES_WAIT{$cmd}{$sub} = 1;
            return $out if defined $out;
            die $err;
        }
        # A usage error with -w, whose value was checked above: an older
        # command that does not take it, unless the same call without -w
        # (below) is a usage error too. A usage error changes nothing, so
        # trying is safe, and no message has to be read.
        $TAKES_WAIT{$cmd}{$sub} = 0;
        $refused = $err;
    }
    # An older command waits up to $COMMAND_LOCK_WAIT seconds and cannot be
    # told otherwise: a longer wait is made of as many such waits as fit in
    # it, and a shorter one is that one wait (stopping the command early
    # could leave a committed update reported as a failure).
    my $runs = defined $wait && $wait >= 2 * $COMMAND_LOCK_WAIT ? int($wait / $COMMAND_LOCK_WAIT) : 1;
    my $deadline;
    if ($runs > 1) {
        require Time::HiRes;
        $deadline = Time::HiRes::time() + $wait;
    }
    while (1) {
        my $out = eval { _call($ctx, @args) };
        return $out if defined $out;
        my $err = $@;
        if ($refused && ref $err && $err->code eq 'bad_argument') {
            # Not about -w after all: the first answer stands.
            delete $TAKES_WAIT{$cmd}{$sub};
            die $refused;
        }
        undef $refused;
        die $err unless ref $err && ($err->code eq 'busy' || $err->code eq 'timed_out')
          && --$runs > 0 && $deadline - Time::HiRes::time() >= $COMMAND_LOCK_WAIT;
    }
}

sub _counter_value {
    my ($out, $path) = @_;
    my ($v) = $out =~ /\A(\d+)\n?\z/;
    die _error(
        code    => 'command_failed',
        message => "Tokenlock: incr $path: the tokenlock command printed no counter value (it printed \"$out\")",
    ) unless defined $v;
    # Kept as the decimal string: values above 2**53 stay exact.
    return $v;
}

# The counter's value without the lock and without the command: undef
# when the file does not exist. A counter is replaced by rename, so a read
# never sees half of an update. Opened without blocking and checked with
# stat on the handle before the first byte: a FIFO planted at the path
# would block an open or a read, a device (/dev/zero) would never end.
sub read_counter {
    my ($path) = @_;
    _path_arg('read counter', 'the counter file', $path, 1);
    require Fcntl;
    my $fh;
    unless (sysopen($fh, $path, Fcntl::O_RDONLY() | Fcntl::O_NONBLOCK())) {
        return undef if $!{ENOENT};
        my ($cause, $errno) = ("$!", $! + 0);
        die _error(
            code    => 'system',
            errno   => $errno,
            message => "Tokenlock: read counter $path: cannot open it: $cause",
        );
    }
    my @st = stat $fh;
    if (!@st || !Fcntl::S_ISREG($st[2])) {
        my $errno = @st ? (eval { require POSIX; POSIX::EINVAL() } || 22) : $! + 0;
        close $fh;
        die _error(
            code    => 'system',
            errno   => $errno,
            message => "Tokenlock: read counter $path: it is not a regular file (a FIFO, a device, a socket or a "
              . 'directory) and was not read: remove it, and the counter starts again from 0',
        );
    }
    if ($st[7] > $COUNTER_LIMIT) {
        close $fh;
        die _counter_too_large($path, $st[7]);
    }
    binmode $fh;
    my $text = '';
    while (1) {
        my $r = sysread($fh, $text, $COUNTER_LIMIT + 1 - length $text, length $text);
        next if !defined $r && $!{EINTR};
        die _error(code => 'system', errno => $! + 0, message => "Tokenlock: read counter $path: cannot read it: $!")
          unless defined $r;
        last if $r == 0;
        die _counter_too_large($path, length $text) if length $text > $COUNTER_LIMIT;
    }
    close $fh;
    # The rules of tokenlock incr: one canonical unsigned 64-bit decimal and
    # a newline, nothing else.
    if ($text =~ /\A(0|[1-9][0-9]{0,19})\n\z/
        && (length $1 < 20 || $1 le '18446744073709551615'))
    {
        return $1;
    }
    my $shown = substr($text, 0, 24);
    $shown =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge;
    $shown .= '...' if length $text > 24;
    die _error(
        code    => 'corrupt_data',
        message => "Tokenlock: read counter $path: the file does not hold one unsigned decimal and a newline "
          . "(it starts with \"$shown\"); it was left as it is: repair or remove it by hand",
    );
}

# ---------------------------------------------------------------------------

package Tokenlock::Redis;

# A lock that is a name in a Redis server (docs/redis.md), for hosts that
# share no filesystem. Core Perl has no Redis client, so each call runs
# the tokenlock command with --redis: the same keys, scripts and fences as
# the C++ library, and the same errors.

use strict;
use warnings;

sub _wait_args {
    my ($step, $opts) = @_;
    my $wait = defined $opts->{wait} ? $opts->{wait} : 10;
    return () if $wait eq 'forever';
    Tokenlock::_seconds($step, 'wait', $wait, 1);
    return $wait == 0 ? ('-n') : ('-w', $wait);
}

sub _lease_args {
    my ($step, $opts) = @_;
    return () unless defined $opts->{lease};
    Tokenlock::_lease_us($step, $opts->{lease});
    return ('--lease', $opts->{lease});
}

sub _url_arg {
    my ($step, $url, $name) = @_;
    Tokenlock::_usage($step, 'the Redis URL must be a non-empty string such as redis://127.0.0.1:6379')
      unless defined $url && length $url && !ref $url;
    Tokenlock::_usage($step, 'the lock name must be a non-empty string') unless defined $name && length $name && !ref $name;
    Tokenlock::_usage($step, 'the lock name must not start with "-"') if $name =~ /\A-/;
}

# The URL with its password masked, whatever is malformed: everything
# before the last '@' of the part after the scheme is user information, a
# ':' in an authority without '@' that no port follows may start a
# password typed without its '@', and password parameters are masked too.
sub _masked {
    my ($url) = @_;
    return $url unless defined $url && !ref $url;
    my ($scheme, $rest) = $url =~ m{\A([A-Za-z][A-Za-z0-9+.-]*:(?://?)?)?(.*)\z}s;
    $scheme = '' unless defined $scheme;
    my $at = rindex($rest, '@');
    if ($at >= 0) {
        my $colon = index($rest, ':');
        $rest = ($colon >= 0 && $colon < $at ? substr($rest, 0, $colon) . ':***' : '***') . substr($rest, $at);
    }
    else {
        $rest =~ s{\A((?:\[[^\]]*\])?[^/?#:\[]*):(?![0-9]*(?:[/?#]|\z))[^/?#]*}{$1:***};
    }
    $rest =~ s{([?&;](?:pass|password|auth|requirepass)=)[^&;#]*}{$1***}gi;
    return $scheme . $rest;
}

# The password alone (as the URL gives it, encoded or not), to take out of
# what the command says; undef when there is none worth searching for.
sub _password {
    my ($url) = @_;
    my ($rest) = $url =~ m{\A(?:[A-Za-z][A-Za-z0-9+.-]*:(?://?)?)?(.*)\z}s;
    my $at = rindex($rest, '@');
    return undef if $at < 0;
    my $user = substr($rest, 0, $at);
    my $pw = index($user, ':') >= 0 ? substr($user, index($user, ':') + 1) : $user;
    return length $pw >= 3 ? $pw : undef;
}

# The command and its errors: the URL reaches the child in its environment
# only (--redis env:TOKENLOCK_URL), never on its argv, which every local
# user can read; whatever the command says is masked once more.
sub _call_redis {
    my ($url, $ctx, @args) = @_;
    $ctx->{env} = { TOKENLOCK_URL => $url };
    my $out = eval { Tokenlock::_call($ctx, @args) };
    return $out if defined $out;
    my $err = $@;
    if (ref $err) {
        my $pw = _password($url);
        for my $k (qw(message output)) {
            next unless defined $err->{$k};
            $err->{$k} =~ s/\Q$url\E/_masked($url)/ge;
            $err->{$k} =~ s/\Q$pw\E/***/g if defined $pw;
        }
    }
    die $err;
}

# The URL of each lock, outside the object's hash, so that a dump of the
# object (Data::Dumper, a logged structure) cannot show its password.
my %URL;

sub _id { require Scalar::Util; return Scalar::Util::refaddr($_[0]) }

sub acquire {
    my ($class, $url, $name, %opts) = @_;
    Tokenlock::_check_opts('acquire', \%opts, qw(wait lease));
    _url_arg('acquire', $url, $name);
    my $what = _masked($url) . " $name";
    my $wait = defined $opts{wait} ? $opts{wait} : 10;
    my @args = ('acquire', '--redis', 'env:TOKENLOCK_URL', _wait_args('acquire', \%opts), _lease_args('acquire', \%opts),
        $name);
    my $out = _call_redis($url, { step => 'acquire', path => $what, opts => \%opts,
        busy => $wait eq 'forever' || $wait > 0 ? 'timed_out' : 'busy' }, @args);
    my ($token) = $out =~ /\A([0-9]+\.[A-Za-z0-9_.-]+)\n?\z/
      or die Tokenlock::_error(code => 'command_failed',
        message => "Tokenlock: acquire $what: the tokenlock command printed no token: \"$out\"");
    my $self = bless { name => $name, what => $what, token => $token, pid => $$, held => 1,
        command => $opts{command} }, ref($class) || $class;
    $URL{ _id($self) } = $url;
    return $self;
}

sub try_acquire {
    my ($class, $url, $name, %opts) = @_;
    $opts{wait} = 0 unless defined $opts{wait};
    my $lock = eval { $class->acquire($url, $name, %opts) };
    return $lock if $lock;
    my $err = $@;
    return undef if ref $err && ($err->code eq 'busy' || $err->code eq 'timed_out');
    die $err;
}

sub token { $_[0]{token} }
sub name  { $_[0]{name} }
# Masked: the URL given, with its password as ***.
sub url   { _masked($URL{ _id($_[0]) }) }
sub held  { $_[0]{held} && $_[0]{pid} == $$ ? 1 : 0 }

# The fencing token: grows with every grant of this name.
sub fence { my ($f) = $_[0]{token} =~ /\A([0-9]+)/; return $f }

sub _owned { Tokenlock::_owned(@_) }

sub _command {
    my ($self, $step, @args) = @_;
    my $ctx = { step => $step, path => $self->{what},
        opts => defined $self->{command} ? { command => $self->{command} } : {} };
    my $out = eval {
        _call_redis($URL{ _id($self) }, $ctx, $step, '--redis', 'env:TOKENLOCK_URL', @args, $self->{name}, $self->{token});
    };
    return $out if defined $out;
    my $err = $@;
    $self->{held} = 0 if ref $err && $err->code eq 'lock_lost';
    die $err;
}

sub refresh {
    my ($self, %opts) = @_;
    Tokenlock::_check_opts('refresh', \%opts, qw(lease));
    $self->_owned('refresh');
    $self->_command('refresh', _lease_args('refresh', \%opts));
    return $self->{token};
}

sub release {
    my ($self) = @_;
    $self->_owned('release');
    $self->_command('release');
    $self->{held} = 0;
    return 1;
}

sub DESTROY {
    my ($self) = @_;
    if ($self->{held} && $self->{pid} == $$) {
        local ($@, $!, $?);
        eval { $self->release; 1 }
          or warn "Tokenlock: the Redis lock $self->{name} was still held when its object went away, "
          . "and releasing it failed: $@";
    }
    delete $URL{ _id($self) };
}

sub CLONE_SKIP { 1 }

sub with_lock {
    my ($url, $name, $code, %opts) = @_;
    Tokenlock::_usage('with_lock', 'the third argument must be a code reference') unless ref $code eq 'CODE';
    my $lock = Tokenlock::Redis->acquire($url, $name, %opts);
    return Tokenlock::_run_held($lock, $code, wantarray, _masked($url) . " $name");
}

# Who holds NAME: undef when free, else { token, fence, pid, host_tag,
# remaining_ms }, from the command's status --json.
sub holder {
    my ($url, $name, %opts) = @_;
    Tokenlock::_check_opts('status', \%opts, ());
    _url_arg('status', $url, $name);
    my $what = _masked($url) . " $name";
    my $out = _call_redis($url, { step => 'status', path => $what, opts => \%opts },
        'status', '--json', '--redis', 'env:TOKENLOCK_URL', $name);
    require JSON::PP;
    my $s = eval { JSON::PP::decode_json($out) }
      or die Tokenlock::_error(code => 'command_failed',
        message => "Tokenlock: status $what: the tokenlock command printed what is not JSON: \"$out\"");
    return undef unless ($s->{state} || '') eq 'held';
    return { map { $_ => $s->{$_} } grep { exists $s->{$_} } qw(token fence owner pid host_tag remaining_ms) };
}

package Tokenlock::Error;

use overload
  '""'     => sub { $_[0]{message} . "\n" },
  'bool'   => sub { 1 },
  fallback => 1;

sub new {
    my ($class, %f) = @_;
    return bless {%f}, $class;
}

sub code    { $_[0]{code} }
sub errno   { $_[0]{errno} || 0 }
sub status  { $_[0]{status} }
sub message { $_[0]{message} }
sub command { @{ $_[0]{command} || [] } }
sub value   { $_[0]{value} }

1;

__END__

=head1 NAME

Tokenlock - file locks that work where flock(2) does not, for Perl

=head1 SYNOPSIS

    use Tokenlock qw(with_lock write_file increment);

    # A critical section: at most one process at a time runs the block.
    my $n = with_lock('/home/alice/data/db.lock', sub {
        my $v = read_my_data();
        write_my_data($v + 1);
        $v + 1;
    }, wait => 5);

    # The same, held across code of your own.
    my $lock = Tokenlock->acquire('/home/alice/data/db.lock', wait => 5, lease => 60);
    ...
    $lock->refresh(lease => 60);      # a long job keeps its lease alive
    $lock->release;                   # or let $lock go out of scope

    # Not waiting at all.
    if (my $lock = Tokenlock->try_acquire('/home/alice/data/cron.lock')) { ... }

    # Replace a file atomically: readers see the old or the new file, never a
    # torn or empty one.
    write_file('/home/alice/data/config.json', $json, sync => 'file_and_dir');

    # A counter that loses no increment under any number of processes.
    my $hits = increment('/home/alice/data/hits.count');

    # Errors are objects.
    my $ok = eval { increment($file); 1 };
    if (!$ok && ref $@ && $@->code eq 'corrupt_data') { ... }
    if (!$ok && ref $@ && $@->code eq 'system' && $@->errno == POSIX::ENOSPC()) { ... }

=head1 DESCRIPTION

Tokenlock locks with one rename(2) per step, so it works on NFS and other
network filesystems and on shared web hosts, where flock(2) is missing or
unreliable. A holder that dies is noticed at once on the same host, and a
lock can never be stolen from a live holder (docs/protocol.md).

The module is pure Perl with core modules only (Perl 5.8.1 or newer). It
implements the protocol of docs/protocol.md itself: the lock, its
takeover of stale tokens, the atomic write and the update committed
through the lock's token. It starts no process, so it works where the
C<tokenlock> command cannot run (hosts that mount home directories
C<noexec>, other architectures), and it shares every lock directory with
the command, the C++ library and the other language modules.

A call of C<write_file> or C<increment> given the C<command> option still
runs that command (docs/tokenlock.1.md), without a shell, as earlier
versions of this module did for every operation.

Under taint mode (C<perl -T>) the module works with the paths the caller
untainted: it does not launder them. A tainted path, C<lock> or C<lease>
given to a call that changes anything (a path from C<%ENV> or C<@ARGV>,
as a CGI gets it) is refused before anything is touched, with a
C<Tokenlock::Error> of code C<bad_argument> that names the argument, says
it is tainted and how to untaint it: with a regex that accepts only what
you expect, as in

    my ($path) = $ENV{COUNTER_FILE} =~ m{\A(/home/alice/data/[\w.-]+)\z}
      or die "unexpected counter file\n";

C<holder> and C<read_counter> only read, which taint mode allows with a
tainted path. What the module reads from the system (the host name,
F</proc>, F</dev/urandom>, directory listings) it checks before it puts it
into a name. With the C<command> option (and for C<Tokenlock::Redis>),
C<$ENV{PATH}>, the command's own path (the option or
C<$ENV{TOKENLOCK_COMMAND}>) and every value passed to it must be untainted
too; a tainted one is refused the same way, its value not shown.

What the module does not do, unlike the library: it never maps the wait
board (a waiter polls with backoff, and C++ waiters beside it still get
the lock within the documented bound), and core Perl has no C<renameat>,
so every step names its path, and the lock directory is judged by
C<lstat> at each acquisition rather than once through a descriptor.

C<TOKENLOCK_DIR_MODE> (an octal mode such as C<0775>), as the command
reads it, is the mode of the lock directories and workspaces the module
creates.

Group sharing names one group (docs/security.md, Who is trusted). The
option C<group> of C<acquire>, C<try_acquire>, C<with_lock>, C<holder>,
C<write_file>, C<update_file> and C<increment> (a group name or a decimal
gid), else the environment variable C<TOKENLOCK_GROUP>, names it; this user
must be a member (otherwise C<bad_argument>), and a lock directory the
module creates then gets that group and group write (C<dir_mode | 0070>),
as do its token and workspace. With no group named and group write in
C<TOKENLOCK_DIR_MODE> (C<0775>, C<0770>), the group of a lock directory
this user owns is chosen; another user's lock directory is then refused.
Lock directories, tokens and workspaces of another user are trusted only
in the chosen group; a directory writable by any other group is refused,
with the group to name in the message. Being a member of a group (such as
C<users>) trusts nothing by itself.

A token taken over from a dead owner is emptied of its leftovers only
when it is trusted; without C<openat>, the module walks it with each
directory pinned as the working directory and checked against the
identity it judged (C<lstat('.')>), enters only this user's directories,
removes links without following them, and gives the working directory back
(C<fchdir>). A program with threads of its own (not Perl's) should know
that the working directory changes for that moment.

=head2 Finding the command

Only a call given C<< command => PATH >> runs a command, and runs that
one. C<command_path> finds one in this order:

=over

=item 1. the C<< command => PATH >> option of the call;

=item 2. the environment variable C<TOKENLOCK_COMMAND>;

=item 3. C<tokenlock> in the running script's directory (C<$FindBin::Bin>,
taken when the module is loaded; none under C<perl -e>);

=item 4. F<~/bin/tokenlock> (the home directory from C<HOME>, else from the
password database, since CGI programs often run without C<HOME>);

=item 5. the directories of C<PATH>.

=back

A path given by 1 or 2 is used or refused with an error (code
C<no_command>); it is never replaced by another one found further down.
C<Tokenlock::command_path(%opts)> returns the path a call would use.

=head1 FUNCTIONS AND METHODS

=head2 with_lock

    my @r = Tokenlock::with_lock($lockdir, sub { my ($lock) = @_; ... }, %opts);

Acquires the lock, runs the code with the lock object as its argument, and
releases the lock, also when the code dies: the code's error is then
rethrown unchanged, after the release. Returns what the code returns, in the
caller's context (list, scalar or void). Options are those of C<acquire>.

If the lock turns out to have been lost when it is released (code
C<lock_lost>), C<with_lock> dies even though the code succeeded: another
process may have been in the critical section at the same time. When the
code died too, its error wins and the loss is given as a warning.

=head2 acquire

    my $lock = Tokenlock->acquire($lockdir, wait => SECS, lease => SECS);

Acquires the lock directory C<$lockdir> (created on first use; its parent
must exist) and returns the lock object. The lock is owned by this process
(its pid and start time are in the token), so it is freed at once when this
process dies, however it dies: the next acquisition on this host takes it
over. A lock directory that another user could change (writable by others,
by a group not chosen for sharing, owned by another user outside a named
group, or a symbolic link) is refused with C<untrusted>, with nothing in it
touched. C<< group => NAME >> names the group the lock is shared with (see
L</DESCRIPTION>).

=over

=item C<< wait => SECS >>

How long to wait for a busy lock, in seconds (fractions allowed). Default
10. C<0> tries once (a busy lock gives the error C<busy>); C<'forever'> waits
as long as it takes. When the wait runs out the error is C<timed_out>.

=item C<< lease => SECS >>

How long the lock is this holder's without a C<refresh>, in seconds
(default 3600, at most 24 hours). Once the lease has ended, and the skew
allowance of 1 s after it, the lock is stale and the next process that
asks takes it over (docs/protocol.md, Stale): whether its holder is still
running, stopped or on another host. A holder that works longer than its
lease must C<refresh> before the lease ends; otherwise its C<release> (and
C<refresh>, and the commit of an update) dies with C<lock_lost>, and
another process may have been in the critical section meanwhile. A holder
that dies on this host loses the lock at once, whatever its lease.

=item C<< legacy_timeout => SECS >>

When a legacy token (below) counts as stale: at this age (default 60).

=item C<< command => PATH >>

Accepted and ignored: the lock is taken natively.

=back

Bound the wait with C<wait>, not with C<alarm> and a C<die> in its handler:
an acquire interrupted that way may still have renamed the token, leaving
a lock owned by this process that no object will release before the
process ends.

=head2 holder

    my $h = Tokenlock::holder($lockdir, legacy_timeout => SECS);

Who holds the lock, judged as an acquisition would judge it, or C<undef>
when it is free or its directory does not exist. A hash reference:
C<token>, C<path>, C<expires_us> and C<expires> (UTC), C<host_tag>,
C<same_host>, C<pid>, C<start_time>, C<owner> (C<alive>, C<dead> or
C<unknown>), C<stale> (it may be taken over now), C<reason> (the same words
as C<tokenlock status>) and C<legacy>. It changes nothing.

=head2 try_acquire

    my $lock = Tokenlock->try_acquire($lockdir, %opts) or ...;

As C<acquire>, with C<wait> defaulting to 0, but returns C<undef> instead of
dying when the lock is busy or the wait times out. Other failures still die.

=head2 $lock->token, $lock->lockdir, $lock->held

The token (the name of the held token directory, as C<tokenlock status>
shows it), the lock directory, and whether this object still holds the
lock: false after C<release>, after a C<lock_lost> error, and in a forked
child.

=head2 $lock->refresh(lease => SECS)

Extends the lease to SECS from now (default 3600) and returns the new
token, which the object uses from then on. Dies with C<lock_lost> if the
lock was taken over meanwhile; the object then no longer holds it.

=head2 $lock->release

Releases the lock. Dies with C<lock_lost> if it had been taken over (a
lease that ran out, C<tokenlock break --force>): the critical section may
not have been exclusive.

=head2 DESTROY

A lock object that goes out of scope while it still holds the lock
releases it; a failure is given as a warning. It never releases in a
forked child (the object remembers C<$$> at acquire), nor in another
interpreter thread: C<release> and C<refresh> die there with C<not_owner>.

So a script that dies with a lock held (through the stack, or at the
top), calls C<exit>, or ends with the lock in a global releases it as it
ends: the next process gets the lock at once, on any host.

=head2 Signals

SIGTERM, SIGINT and SIGHUP end a Perl process without destructors or
C<END> blocks. From the first acquire on, while the handler of one of
them is the default, the module sets its own: it releases every lock
this process holds (never a parent's, in a forked child), then raises the
signal again with the default action, so the process still ends by that
signal. A handler the program set before is left alone, and then it is
the program's to release (C<exit> from the handler does). SIGKILL, and a
signal that arrives between the rename of an acquire and the return of the
object, leave the token to be taken over: at once by a process on this
host, which sees the owner dead, and after the lease elsewhere.
C<Tokenlock::Redis> locks are not released by these handlers: their lease
frees them.

=head2 write_file

    Tokenlock::write_file($path, $data, sync => 'file_and_dir', lock => $lockdir, wait => SECS);

Replaces C<$path> with C<$data> atomically: a temporary file
C<.NAME.tmp.*> beside it is written, flushed and renamed over it. With
C<lock>, the temporary file is written in the lock's token instead and
renamed over the target through the token's name, so that a writer whose
lock was taken over meanwhile writes nothing (C<lock_lost>). Empty
data writes an empty file. C<$data> is bytes: encode text first (a string
with characters above 255 is refused with C<bad_argument>). Options:

=over

=item C<< sync => 'none' | 'file' | 'file_and_dir' >>

Durability (default C<file_and_dir>): C<file> flushes the new file before the
rename, C<file_and_dir> also the directory after it.

=item C<< lock => $lockdir >>

Replace the file while holding this lock. The whole data is handed over
first, so the lock is held only for the replacement.

=item C<< wait => SECS >>

With C<lock>: how long to wait for it (default 10; 0 tries once), as for
C<increment> below. The errors are C<busy> and C<timed_out>, with the file
left as it was.

=item C<< legacy_timeout => SECS >>

With C<lock>: as for C<acquire>.

=item C<< mode => '0640' >>

The mode of the file, as a string of octal digits (a number such as
C<0640> is refused: it arrives as 416, whose digits would pass for octal),
also when it replaces an existing file. Without it, an existing file keeps
its mode (less setuid and setgid) and a new one gets 0644 minus the umask.

=item C<< follow_symlinks => 1 >>

If C<$path> is a symbolic link, replace the file it points to (by default
the link itself is replaced by a regular file).

=back

=head2 update_file

  my $written = Tokenlock::update_file('data.json', sub {
      my ($old) = @_;              # undef when the file does not exist
      return add_entry($old);      # the new contents, as bytes
  }, lock => 'data.json.lock', wait => 10, lease => 60, sync => 'file_and_dir', mode => '0640');

Locks C<lock> (default the file's name with C<.lock>), reads the file,
calls the code with its contents, and writes what the code returns as a
temporary file in the lock's token directory, renamed over the file
through the token's name: if the lock was taken over meanwhile (this
process stalled past its lease), nothing is written and it dies with
C<lock_lost>. If the code dies, nothing is written, the lock is released
and the error comes out unchanged. Returns the bytes written. The code
runs with the lock held: keep it short, or give a C<lease> that covers
it. On a network filesystem the read is checked against the version mark
of the last commit (C<stale_data>). Options as for L</write_file>, plus
C<lease>; C<sync> defaults to C<file_and_dir>, and a C<dir_sync_failed>
error means the new contents are in place.

=head2 increment

    my $value = Tokenlock::increment($path, by => N, lock => $lockdir, wait => SECS, sync => ...,
                                     legacy_timeout => SECS);

Adds C<by> (default 1; 0 reads the value under the lock) to the counter in
C<$path> under its lock (default C<$path.lock>) and returns the new value
as a decimal string (exact up to 2**64-1). The file holds one unsigned
decimal and a newline; a missing file counts as 0. Anything else is refused
with C<corrupt_data> and left as it is. The new value is committed through
the lock's token, so a process that lost the lock cannot overwrite it
(C<lock_lost>, nothing written). On a network filesystem each commit
leaves a version mark in the token, and a read older than the last commit
is read again and then refused with C<stale_data>
(docs/atomic-writes.md).

When the directory cannot be flushed after the commit, the error is
C<dir_sync_failed> and C<< $err->value >> is the new value: the count is
made (do not repeat it), only a crash could undo it.

C<wait> bounds the wait for the lock, in seconds (default 10, the
command's own; 0 tries once). A busy lock gives C<busy> with C<wait =E<gt> 0>
and C<timed_out> otherwise, with the counter left as it was.

With the C<command> option, the wait is passed as C<tokenlock incr -w>. An
older command (a copy installed before C<write> and C<incr> took C<-w>)
refuses it; the module then remembers that for the rest of the process and lets the command wait
its own 10 seconds: a C<wait> of 20 or more is made of as many such waits
as fit in it, and a shorter one is that one wait. The command is never cut
short, since one stopped just after its commit would have counted an
increment reported as failed. Finding this out costs an older command one
more process start per process (in a CGI program, per hit): update the
command.

=head2 read_counter

    my $value = Tokenlock::read_counter($path);   # undef if the file is missing

The counter's value, read without the lock and without running the
command. The counter is replaced by rename, so the read sees one version or
the next, never a mix. Dies with C<corrupt_data> under the same rules as
C<increment>, and for a file over 64 bytes (not read). A FIFO, a device, a
socket or a directory at the path is refused with C<system> before anything
is read: it is opened without blocking and checked first.

=head2 Scripts that lock with lockfile<seconds>

Many scripts on shared hosts lock the same layout with a rename lock of
their own, written in Perl: they rename F<LOCKDIR/lockfile> to
F<LOCKDIR/lockfile> followed by the time in seconds, and take over such a
name once it is 60 seconds old. The command treats these names as held
tokens, judged by their age, and those scripts never take over a token of
ours, so a site can move to this module one script at a time, with both on
the same lock directories (docs/protocol.md, Legacy tokens, has the
conditions, such as the pattern those scripts must use). C<acquire>,
C<with_lock>, C<write_file> and C<increment> take C<legacy_timeout> for
scripts that use another age than 60 seconds.

=head2 Tokenlock::Redis: a lock in a Redis server

For hosts that share no filesystem, a lock can be a name in a Redis server
(docs/redis.md). Core Perl has no Redis client, so these calls run the
command with C<--redis> (one process start each); they share the lock with
the command and the C++ library, with the same fences.

  my $lock = Tokenlock::Redis->acquire('redis://127.0.0.1:6379', 'report', wait => 10, lease => 60);
  my $fence = $lock->fence;      # grows with every grant of this name
  $lock->refresh(lease => 60);   # lock_lost if another took it meanwhile
  $lock->release;

  Tokenlock::Redis::with_lock($url, 'report', sub { ... }, wait => 10);
  my $lock = Tokenlock::Redis->try_acquire($url, 'report');   # undef when held
  my $h = Tokenlock::Redis::holder($url, 'report');  # undef, or { token, fence, owner, pid, host_tag, remaining_ms }

URLs as the command takes them: C<redis://[[user]:password@]host[:port][/db]>
or C<unix:///path/to/socket>. A password (or user) holding any of
C<@ : / ? # [ ] %> or a space must be percent-encoded (C<%40> for C<@>,
C<%3A> for C<:>, C<%2F>, C<%3F>, C<%23>, C<%5B>, C<%5D>, C<%25>, C<%20>).
The URL never reaches the command's argv, which every local user can read
in the process list: the command gets C<--redis env:TOKENLOCK_URL> and the
URL in its environment only (a command from before C<env:> refuses it:
update the command). The object keeps the URL outside its hash, so a dump
of it (C<Data::Dumper>) does not show it; C<< $lock->url >> and every message
and C<< $err->command >> show the password as C<***>, whatever is malformed
in the URL. C<wait> is as for C<acquire> (default 10
seconds; C<'forever'>; 0 for one try), C<lease> defaults to the command's
300 seconds. Redis cannot see that a holder died: a grant ends with its
lease, so keep leases short and refresh. The object releases a forgotten
lock when it goes away, never in a forked child, whose C<release> dies with
C<not_owner>. Errors are C<Tokenlock::Error> objects with the codes of
L</ERRORS>: C<busy>, C<timed_out>, C<lock_lost>, C<bad_argument> (a bad URL,
name or option), C<system> with the errno of a connection that failed.

=head1 ERRORS

Every failure dies with a C<Tokenlock::Error> object:

    $err->code      # the error's name, below
    $err->errno     # for code 'system': the errno (else 0)
    $err->status    # the exit status the command gives for this error (undef for not_owner)
    $err->message   # it names the path, the step, the cause and the fix
    $err->command   # with the command option: the command line that was run, as a list
    $err->value     # dir_sync_failed from increment: the new value (counted)

It stringifies to the message followed by a newline, as C<die>'s own
messages end, so C<warn "failed: $@"> and an uncaught error read well.

The code is the library's name for the error (tokenlock/errors.hpp), the
same in the C interface, the command's C<--errors=json> line and the PHP
and Python modules. When it runs the command, the module runs it with
C<TOKENLOCK_ERRORS=json> and takes the name from that line; it never reads
the message to tell errors apart.

    code            status  meaning
    busy            1       the lock is held and wait was 0
    timed_out       1       the lock stayed held for the whole wait
    lock_lost       3       the lock does not hold this token any more: it was
                            taken over (lease ended, tokenlock break --force)
    bad_argument    64      a malformed argument (a lease, a number, a token,
                            a path), to the command or to this module
    corrupt_data    65      a counter that is not one unsigned decimal and a
                            newline (left as it is)
    token_missing   69      the lock directory holds no token: fix by hand
    lock_corrupt    69      two tokens, or a malformed one: fix by hand
    not_owner       -       release or refresh of a lock this object does not
                            hold (released, lost, or a forked child's copy)
    dir_sync_failed 74      the directory could not be flushed after the
                            rename: the new contents are in place, or the
                            count is made ($err->value has it), but a crash
                            may undo them; do not repeat the call
    stale_data      75      a network filesystem served an old version of the
                            file; nothing was written: retry
    untrusted       77      another user could change the lock directory
    system          66-77   a system call failed: $err->errno says which
                            (ENOENT, EACCES, ENOSPC, EOVERFLOW for an
                            increment past 2**64-1, ...)
    no_command      -       the tokenlock command is not found or cannot run
    command_failed  any     the command died, answered nonsense, or is too
                            old to name its error (then only busy, timed_out,
                            lock_lost and bad_argument are told apart)

=head1 DEPLOYMENT ON SHARED HOSTING

Shared hosts run Perl with its core modules and let you copy files into your
home directory, which is all this needs:

=over

=item 1.

Optionally, copy the statically linked C<tokenlock> command to
F<~/bin/tokenlock> to check the data directory (C<~/bin/tokenlock doctor
~/data>) and to look at locks (C<tokenlock status>). The module itself
does not need it.

=item 2.

Copy F<Tokenlock.pm> beside your script, or into a F<lib> directory beside
it, and load it with

    use FindBin;
    use lib $FindBin::Bin, "$FindBin::Bin/lib";
    use Tokenlock;

=item 3.

Keep lock directories and data outside the web root (for instance
F<~/data>), in a directory that every process using them can write and
search, and that is not sticky (F</tmp> is): in a sticky directory only a
file's owner may rename it.

=back

Under suEXEC the scripts run as you, and everything above can stay private
(C<0700> directories). Without suEXEC they run as the server's user, which
then needs write permission on the data directory.

=head1 SEE ALSO

tokenlock(1) (docs/tokenlock.1.md in the source tree), docs/protocol.md,
docs/atomic-writes.md.

=head1 LICENSE

Copyright (c) 2026 The tokenlock authors. Released under the MIT licence:
the file LICENSE at the top of the source tree.

=cut
