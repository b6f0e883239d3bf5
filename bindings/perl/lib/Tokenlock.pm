package Tokenlock;

# Perl binding of tokenlock: the protocol of docs/protocol.md written in
# plain Perl, with core modules only. This file is the public package: it
# loads the parts under Tokenlock/ and binds the public names to the subs
# that implement them there; the POD at the end is the manual, and its
# section LAYOUT says which part does what.

use 5.008001;
use strict;
use warnings;

# Only small modules are loaded, since a CGI program pays for each of them
# at every hit: POSIX and Time::HiRes only where they are needed, FindBin
# not at all.
use Exporter ();

# The parts (each loads the parts it needs). A copy of this file without
# its directory Tokenlock/ says what to copy, rather than which @INC
# entries lack a file.
BEGIN {
    for my $part (qw(Error Lock Update Counter)) {
        next if eval { require "Tokenlock/$part.pm"; 1 };
        my $why = $@;
        die $why unless $why =~ /\ACan't locate Tokenlock\/\Q$part\E\.pm in \@INC/;
        (my $here = __FILE__) =~ s{[^/]*\z}{};
        die "Tokenlock: loading Tokenlock.pm: cannot find its part Tokenlock/$part.pm: the module is the file "
          . "Tokenlock.pm and the directory Tokenlock/ beside it (${here}Tokenlock/ here); copy both from "
          . "bindings/perl/lib, or install the module with perl Makefile.PL && make install\n";
    }
}

our $VERSION   = '0.1.0';
our @ISA       = ('Exporter');
our @EXPORT_OK = qw(with_lock write_file update_file increment read_counter);

# The public functions, and the methods of a lock object, whose class is
# Tokenlock. Bound, not wrapped: a call goes straight to the sub.
my %PUBLIC = (
    'Tokenlock::Lock'    => [qw(acquire try_acquire token lockdir held mode slots refresh release DESTROY CLONE_SKIP
          with_lock holder holders)],
    'Tokenlock::Update'  => [qw(write_file update_file)],
    'Tokenlock::Counter' => [qw(increment read_counter)],
);
for my $part (keys %PUBLIC) {
    no strict 'refs';
    *{"Tokenlock::$_"} = \&{"${part}::$_"} for @{ $PUBLIC{$part} };
}

# Running the command is needed only by the command option and
# Tokenlock::Redis, which most programs never use: each is compiled by its
# first call (from where Tokenlock.pm is: Tokenlock::System::_load_part),
# not at every CGI hit. Tokenlock::Command is loaded where it is called;
# Tokenlock::Redis replaces these stubs of the subs that make or ask about
# a Redis lock (an object exists only after one).
sub command_path {
    Tokenlock::System::_load_part('Command');
    goto &Tokenlock::Command::command_path;
}

for my $name (qw(acquire try_acquire with_lock holder holders)) {
    no strict 'refs';
    next if defined &{"Tokenlock::Redis::$name"};
    *{"Tokenlock::Redis::$name"} = sub { Tokenlock::System::_load_part('Redis'); goto &{"Tokenlock::Redis::$name"} };
}

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

    # Readers together, never beside a writer; a semaphore of 3.
    my $r = Tokenlock->acquire('/home/alice/data/page.lock', shared => 1, wait => 5);
    with_lock('/home/alice/data/convert.lock', sub { convert() }, slots => 3, wait => 60);

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
board, and core Perl has no C<renameat>, so every step names its path,
and the lock directory is judged by C<lstat> at each acquisition rather
than once through a descriptor.

=head2 Waiting

A process that finds the lock held lines up in the B<turnstile>
(docs/waiting-turnstile.md), the file F<turnstile> inside the lock
directory, which the first such waiter creates (mode C<0600>, or C<0660>
with the chosen group when the lock is shared with a group; never a bit
for others) and every process keeps open for its next wait. Waiters take
turns at its C<flock> without blocking: whoever holds it, the head, alone
polls the lock, every 1 ms, and after 1 ms marks the file hungry (its
size, 1) and polls every 100 microseconds; a process about to take the lock reads
the mark first (one C<lstat>) and, when it is set, lines up instead of
taking the next release from the head. The others sleep, 16 ms at first
and half as long for every 25 ms they have waited, down to 2 ms, before
they try the C<flock> again, and look at the lock themselves every
100 ms and when the wait runs out; no sleep runs past the wait. The head
leaves the turnstile as soon as it holds the lock or gives up.

The turnstile is a hint: every acquisition is still a rename of the
protocol, so it can make a waiter later, never give the lock to two
processes. It is used only on local filesystems (as the mount table
names them: ext4, xfs, btrfs, tmpfs and the like); on a network or FUSE
filesystem, or one the mount table does not name, waiters poll with
backoff (100 microseconds doubling to 50 ms). A F<turnstile> that is not a regular
file of one link, owned by this user or the lock directory's owner and
writable by nobody else (something a trusted user planted), is left as
it is, and its waiters poll. A C<try_acquire> (C<< wait => 0 >>) tries
once, whatever the mark says. C++ waiters (the command, the C API)
line up on the wait board instead; both lines are served.

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

=item C<< shared => 1 >>

A shared hold (a reader): any number of shared holders hold the lock at
once, and no exclusive holder (a writer) beside them. A writer that
finds readers marks the lock: readers that come after the mark wait, and
the last reader out hands the lock to the writer, so a stream of readers
never starves it. See L</Shared locks and semaphores>.

=item C<< slots => N >>

One of N slots (1 to 999999): a semaphore, of which at most N holders
hold at once. Implies C<shared>. Every holder must give the same N: a
holder of another count (or a reader without one) waits until the
holders of the first are gone.

=item C<< lock_type => LOCK_SH | LOCK_EX >>

The mode in File::NFSLock's words, for code that passes them:
C<LOCK_SH> (shared) or C<LOCK_EX> (exclusive), from L<Fcntl>, either with
C<LOCK_NB> for a single try (C<< wait => 0 >> unless C<wait> is given), or
as strings: C<SH>, C<SHARED>, C<EX>, C<EXCLUSIVE>, C<BLOCKING>, C<NB>,
C<NONBLOCKING> joined by C<|>. Both or neither of C<LOCK_SH> and
C<LOCK_EX>, or a C<shared> that says otherwise, is C<bad_argument>.

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
as C<tokenlock status>), C<legacy>, and C<mode>, C<slots> and
C<waiting_writer> as L</holders> gives them. Of shared holders it gives
one (a live one first): L</holders> lists them all. It changes nothing.

=head2 holders

    my @h = Tokenlock::holders($lockdir, legacy_timeout => SECS);

Every holder of the lock, judged as an acquisition would judge them:
one writer, or every shared holder and a writer waiting for them to leave;
an empty list when the lock is free. Each is a hash reference with the
fields of C<holder>, plus C<mode> (C<exclusive> or C<shared>), C<slots>
(the semaphore's size, 0 for none) and C<waiting_writer> (1 for a
writer's mark, which holds nothing but bars new shared holders). For
shared holders, C<token> is the share's name: a lone share's, or the
holder's C<s.> entry in the token. It changes nothing. C<holder> gives
one of them (a live share first).

=head2 try_acquire

    my $lock = Tokenlock->try_acquire($lockdir, %opts) or ...;

As C<acquire>, with C<wait> defaulting to 0, but returns C<undef> instead of
dying when the lock is busy or the wait times out. Other failures still die.

=head2 $lock->token, $lock->lockdir, $lock->held

The token (the name of the held token directory, as C<tokenlock status>
shows it), the lock directory, and whether this object still holds the
lock: false after C<release>, after a C<lock_lost> error, and in a forked
child.

=head2 $lock->mode, $lock->slots

C<exclusive> or C<shared>, and the size of the semaphore the hold is a
slot of (0 when it is none).

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

=head2 Shared locks and semaphores

The shared holders and semaphores of docs/protocol.md, Shared locks and semaphores: on disk byte
for byte as every other implementation writes them. A lone shared holder
renames F<lockfile> to a name of its own and back, as a writer does. A
second holder converts that name into a I<group cover>, with an empty
directory C<s.EXPIRY.HOST.PID.START.NONCE> per holder inside the token:
each holder has its own lease and owner, so one whose lease ended, or
whose process died on this host (C<kill -9> included), is no holder any
more, and the others go on. A holder that leaves removes its entry; the
last one out frees the lock, or hands it to the writer that marked it.
The lone holder's share goes into the group as a I<copy> of its name that
the converter made, named for that converter alone, so that a converter
(or a writer that marks) whose rename comes too late removes its copy
and leaves no share of anybody behind. A writer's mark whose lease ended
holds nobody and is taken back, as a dead writer's is.
Implementations that know only docs/protocol.md see one held token of
another host, with the latest lease of its holders, and wait for it.

C<< $lock->refresh >> and C<< $lock->release >> work on a shared hold as
on an exclusive one; a shared hold that was taken over dies with
C<lock_lost>, as an exclusive one does. A shared hold has no fence and no
workspace: a fenced commit refuses it with C<bad_argument> (C<write_file>,
C<update_file> and C<increment> always lock exclusively).

A reader that can join a group joins at once and does not line up in the
turnstile; one that must wait lines up, as a writer does. Core Perl has
no C<openat>: the token is judged by C<lstat> before any entry is made,
listed or removed in it (a symbolic link, FIFO or file as the token admits
no entry; a token writable by others is C<untrusted>), entries are made
with C<mkdir> and removed by their exact names (C<rmdir>, or C<unlink>
for what is not a directory: a link is never followed, a FIFO never
opened), and a malformed entry is C<lock_corrupt> to a writer and to the
last one out, and left where it is.

Shared locks and semaphores are refused with C<not_supported> where owner
marks are made (GlusterFS, an unknown FUSE filesystem).

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

=head2 Tokenlock::Redis

For hosts that share no filesystem, a lock can be a name in a Redis server:
C<Tokenlock::Redis> (there after C<use Tokenlock>) has its own manual,
L<Tokenlock::Redis>. Its shared holds and semaphores take the options
C<shared>, C<slots> and C<lock_type> of L</acquire>, and
C<Tokenlock::Redis::holders> lists them as L</holders> does.

=head1 ERRORS

Every failure dies with a L<Tokenlock::Error> object: C<< $err->code >> is
the error's name (below), C<< $err->errno >> the errno of a C<system>
error, C<< $err->status >> the exit status the command gives for it, and
C<< $err->message >> names the path, the step, the cause and the fix; it
stringifies to the message and a newline. L<Tokenlock::Error> lists every
method.

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
    not_supported   69      a shared lock or semaphore where owner marks are
                            made (GlusterFS): take it exclusively there
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

Copy F<Tokenlock.pm> and the directory F<Tokenlock/> beside it (both are
in F<bindings/perl/lib>) beside your script, or into a F<lib> directory
beside it, and load it with

    use FindBin;
    use lib $FindBin::Bin, "$FindBin::Bin/lib";
    use Tokenlock;

A F<Tokenlock.pm> without its directory dies when it is loaded, saying
what to copy.

=item 3.

Keep lock directories and data outside the web root (for instance
F<~/data>), in a directory that every process using them can write and
search, and that is not sticky (F</tmp> is): in a sticky directory only a
file's owner may rename it.

=back

Under suEXEC the scripts run as you, and everything above can stay private
(C<0700> directories). Without suEXEC they run as the server's user, which
then needs write permission on the data directory.

=head1 LAYOUT

The module is F<Tokenlock.pm> and the parts under F<Tokenlock/>, which
C<use Tokenlock> loads; F<Command.pm> and F<Redis.pm>, which only the
C<command> option and C<Tokenlock::Redis> need, are compiled by their
first call instead, so that a CGI hit does not pay for them.
F<Tokenlock.pm> holds no code of its own beyond loading the parts and
binding the public names to the subs that implement them. The public packages are C<Tokenlock>, L<Tokenlock::Redis> and
L<Tokenlock::Error>; the others are internal, and their subs and
variables may change between versions:

    Tokenlock/Error.pm      the error class, and the making of every error
    Tokenlock/System.pm     clocks, this process's identity, random bits,
                            /proc, the mount table, directory flushes
    Tokenlock/Token.pm      token names: made, parsed, judged stale
    Tokenlock/Args.pm       options, seconds, paths, taint, leases,
                            TOKENLOCK_DIR_MODE and TOKENLOCK_GROUP
    Tokenlock/Trust.pm      the trust rules of docs/security.md
    Tokenlock/Directory.pm  the lock directory: looked at, created, cleaned
    Tokenlock/Marks.pm      owner marks (GlusterFS)
    Tokenlock/Turnstile.pm  the turnstile waiters line up in: the file
    Tokenlock/Shared.pm     shared holders and semaphores: shares, entries,
                            joins, leaving, a writer's mark and hand-over
    Tokenlock/Protocol.pm   acquiring: the rounds of the protocol, waiting
    Tokenlock/Lock.pm       the lock object, with_lock, holder, signals
    Tokenlock/Files.pm      the atomic write, reading a target
    Tokenlock/Command.pm    finding and running the tokenlock command
    Tokenlock/Update.pm     the fenced update; write_file, update_file
    Tokenlock/Counter.pm    increment, read_counter
    Tokenlock/Redis.pm      Tokenlock::Redis, through the command

Each part imports by name what it uses from the parts above it in this
list, never from one below, so each can be read with only those above it
in mind.

=head1 SEE ALSO

tokenlock(1) (docs/tokenlock.1.md in the source tree), docs/protocol.md,
docs/atomic-writes.md.

=head1 LICENSE

Copyright (c) 2026 The tokenlock authors. Released under the MIT licence:
the file LICENSE at the top of the source tree.

=cut
