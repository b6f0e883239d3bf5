package Tokenlock::System;

# What the module asks of the system beyond plain file calls: the clocks,
# this process's identity (host tag, pid, start time), random bits, /proc,
# the mount table, directory listings and directory flushes. POSIX and
# Time::HiRes are loaded only when a call needs them (_native_setup): a
# CGI program pays for each module at every hit.

use strict;
use warnings;

use Fcntl ();

require Exporter;
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(_fnv1a _fs_type _fsync_dir _identity _load_part _names _native_setup _nonce _now_us _proc_stat _script_dir _sleep_us _steady_us);

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

# FNV-1a, 64 bits, as lib/src/core/fnv1a.hpp, in two 32-bit halves so that no
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
# once per process, and again in a forked child. $pid: $$ as the caller
# read it (each read of $$ is a getpid(2)), so that an acquisition reads it
# once.
my %ID;

sub _identity {
    my ($pid) = @_;
    $pid = $$ unless defined $pid;
    return \%ID if defined $ID{pid} && $ID{pid} == $pid;
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
    my (undef, $start) = _proc_stat($pid);
    %ID = (
        pid      => $pid,
        start    => defined $start ? $start : 0,
        # Checked, and so untainted for perl -T: it goes into every token.
        host_tag => (sprintf('%s-%08x', $host, ($hi ^ $lo)) =~ /\A([A-Za-z0-9_-]{1,32}-[0-9a-f]{8})\z/)[0],
        random   => undef,
        pool     => '',
    );
    # The part of every token that is the same for the whole process.
    $ID{owner} = join('.', $ID{host_tag}, $ID{pid}, $ID{start});
    # Shared names carry the host tag with its hash inverted (stag), so
    # that an implementation that knows no shared names judges them by
    # their lease alone (docs/protocol.md, Shared locks and semaphores: Why these forms); and the
    # start time in 12 digits, 0 when it does not fit.
    $ID{stag} = substr($ID{host_tag}, 0, -8) . sprintf('%08x', hex(substr($ID{host_tag}, -8)) ^ 0xffffffff);
    $ID{start12} = sprintf('%012s', length $ID{start} <= 12 ? $ID{start} : 0);
    return \%ID;
}

# 64 random bits as 16 hex digits: unique per acquisition. The source is
# opened once per process; a forked child opens its own. $id: this
# process's identity, when the caller has it.
sub _nonce {
    my $id = $_[0] || _identity();
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

sub _fsync_dir {
    my ($path) = @_;
    require IO::Handle;
    my $fh;
    sysopen($fh, $path, Fcntl::O_RDONLY() | (eval { Fcntl::O_DIRECTORY() } || 0)) or return 0;
    my $ok = $fh->sync;
    close $fh;
    return $ok ? 1 : 0;
}

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

# The modules the native calls need, loaded by the first of them: a
# script that only loads Tokenlock does not pay for them.
my $SET_UP;

sub _native_setup {
    return if $SET_UP;
    require Time::HiRes;
    require Fcntl;
    require POSIX;
    require IO::Handle;
    $SET_UP = 1;
}

# The running script's directory, as FindBin's $Bin, worked out now, before
# the script can change directories. FindBin itself is used when the script
# loaded it; otherwise this saves loading Cwd and File::Spec on every run.
# No script (perl -e, standard input): no directory.
my $SCRIPT_DIR = _find_script_dir();

sub _script_dir { $SCRIPT_DIR }

sub _find_script_dir {
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

# The directory holding Tokenlock.pm, as an absolute path taken at load.
# The parts compiled by their first call (Tokenlock::Command and
# Tokenlock::Redis) are looked for there first: found after the program
# changed directories (an @INC entry such as 'lib' names a directory
# relative to the working one), and of the same version as the parts
# loaded with them. The working directory read to make a relative path
# absolute is this program's own, and is untainted for perl -T as
# FindBin's $Bin is by the programs that use it.
my $LIB = _find_lib();

sub _find_lib {
    (my $dir = __FILE__) =~ s{/?Tokenlock/System\.pm\z}{} or return undef;
    $dir = '.' unless length $dir;
    if ($dir !~ m{\A/}) {
        my $cwd = readlink('/proc/self/cwd');
        if (!defined $cwd || $cwd !~ m{\A/}) {
            require Cwd;
            $cwd = Cwd::getcwd();
        }
        return undef unless defined $cwd && $cwd =~ m{\A/};
        $dir = "$cwd/$dir";
    }
    return -f "$dir/Tokenlock.pm" ? ($dir =~ /\A(.*)\z/s)[0] : undef;
}

# Compiles part $part (Command, Redis) where Tokenlock.pm is, unless it is
# loaded already.
sub _load_part {
    my ($part) = @_;
    return if $INC{"Tokenlock/$part.pm"};
    local @INC = (defined $LIB ? $LIB : (), @INC);
    require "Tokenlock/$part.pm";
}

1;
