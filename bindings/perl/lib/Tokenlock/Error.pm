package Tokenlock::Error;

# The error class: every failure of the module dies with one of these
# objects. Also the constructors the other packages use to make them, so
# that every message and exit status is made the same way. The POD at the
# end is the class's manual.

use strict;
use warnings;

use overload
  '""'     => sub { $_[0]{message} . "\n" },
  'bool'   => sub { 1 },
  fallback => 1;

# The module's own packages import the constructors. The class inherits
# nothing from Exporter: an error object gets no methods of Exporter's.
sub import { require Exporter; goto &Exporter::import }
our @EXPORT_OK = qw(_error _lock_error _system_error _usage);

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

# ---------------------------------------------------------------------------
# Making errors

sub _error {
    my (%f) = @_;
    return Tokenlock::Error->new(%f);
}

sub _usage {
    my ($step, $what) = @_;
    die _error(code => 'bad_argument', message => "Tokenlock: $step: $what");
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

1;

__END__

=head1 NAME

Tokenlock::Error - the errors of Tokenlock

=head1 SYNOPSIS

    use Tokenlock qw(increment);

    my $ok = eval { increment($file); 1 };
    if (!$ok && ref $@ && $@->code eq 'corrupt_data') { ... }
    if (!$ok && ref $@ && $@->code eq 'system' && $@->errno == POSIX::ENOSPC()) { ... }

=head1 DESCRIPTION

Every failure of L<Tokenlock> and L<Tokenlock::Redis> dies with a
C<Tokenlock::Error> object. C<use Tokenlock> loads this class.

=head1 METHODS

    $err->code      # the error's name, below
    $err->errno     # for code 'system': the errno (else 0)
    $err->status    # the exit status the command gives for this error (undef for not_owner)
    $err->message   # it names the path, the step, the cause and the fix
    $err->command   # with the command option: the command line that was run, as a list
    $err->value     # dir_sync_failed from increment: the new value (counted)

It stringifies to the message followed by a newline, as C<die>'s own
messages end, so C<warn "failed: $@"> and an uncaught error read well.

=head1 SEE ALSO

L<Tokenlock/ERRORS>: every code, its exit status and what it means.

=head1 LICENSE

Copyright (c) 2026 The tokenlock authors. Released under the MIT licence:
the file LICENSE at the top of the source tree.

=cut
