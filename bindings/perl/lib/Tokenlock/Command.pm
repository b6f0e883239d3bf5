package Tokenlock::Command;

# Finding and running the tokenlock command, without a shell, for what the
# module still runs it for: the command option of write_file and
# increment, and Tokenlock::Redis. Errors are named as the library names
# them (tokenlock/errors.hpp): the command is run with
# TOKENLOCK_ERRORS=json, and its last line on stderr,
# {"error": NAME, "errno": N, "message": ...}, gives the name and errno.

use strict;
use warnings;

use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);
use Tokenlock::Error qw(_error);
use Tokenlock::Args qw(_seconds _untainted);
use Tokenlock::System qw(_script_dir);

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_call _call_waiting);

# `tokenlock write` and `incr` wait this long for their lock unless told
# otherwise with -w, which older commands do not take.
my $COMMAND_LOCK_WAIT = 10;

# Per command path and subcommand (write, incr): whether it takes -w. Found
# out by trying, once per process: an older command refuses the option as a
# usage error.
my %TAKES_WAIT;

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
    my $script_dir = _script_dir();
    if (defined $script_dir) {
        my $p = "$script_dir/tokenlock";
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
    my ($out, $err) = _exchange($out_r, $err_r, $in_w, $stdin);
    return _reap($pid, $exec_r, $out, $err);
}

# Writes $stdin to the child's standard input $in_w (undef: none, or
# already closed) while reading its stdout and stderr to their ends;
# returns what they said.
sub _exchange {
    my ($out_r, $err_r, $in_w, $stdin) = @_;
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
    return ($buf{out}, $buf{err});
}

# The end of a run: the errno of a failed exec, which the child writes to
# $exec_r (closed without a word when exec worked), then its exit status.
sub _reap {
    my ($pid, $exec_r, $out, $err) = @_;
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
    return { status => $status, stdout => $out, stderr => $err };
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

1;
