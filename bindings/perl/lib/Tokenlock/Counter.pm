package Tokenlock::Counter;

# Counters: increment (a fenced update of one unsigned decimal, or the
# command's incr) and read_counter (a read without the lock).

use strict;
use warnings;

use Fcntl ();
use Tokenlock::Error qw(_error _system_error _usage);
use Tokenlock::System qw(_load_part _native_setup);
use Tokenlock::Args qw(_arg_path _check_opts _group_args _legacy_timeout _path_arg _seconds _sync);
use Tokenlock::Files qw(_counter_too_large);
use Tokenlock::Update qw(_native_update);

# The limit of a counter file, copied from Tokenlock::Files: never changed.
my $COUNTER_LIMIT = $Tokenlock::Files::COUNTER_LIMIT;

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
    _load_part('Command');
    my $out = eval { Tokenlock::Command::_call_waiting({ step => $step, path => $path, opts => \%opts, busy => 'timed_out' },
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

1;
