#!/usr/bin/perl
# Clearing a token taken over from a dead owner (docs/security.md): judged
# first, walked pinned by chdir, never through a link, entering only this
# user's directories, and the working directory given back. The race with
# a swapping attacker is tests/security/attacks_perl.sh.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use Cwd ();
use TokenlockTest;
use Tokenlock;

tokenlock_command();
my $dir = scratch_dir();
delete @ENV{qw(TOKENLOCK_GROUP TOKENLOCK_DIR_MODE)};
my $stale = 'lockfile.1000000.elsewhere-0badc0de.7.0.0123456789abcdef';
my $n = 0;

# The victim's files, which a link in the token names.
mkdir "$dir/keep" or die;
spit("$dir/keep/$_", "canary\n") for qw(a b docs);

# A lock directory with a stale token holding files, a directory, and
# links to the victim's directory and files; $mode: the token's mode.
sub stale_lock {
    my ($mode) = @_;
    my $L = "$dir/c" . ++$n . '.lock';
    mkdir $L or die;
    mkdir "$L/$stale" or die;
    spit("$L/$stale/$_", "x\n") for qw(a b);
    mkdir "$L/$stale/sub" or die;
    spit("$L/$stale/sub/a", "x\n");
    symlink("$dir/keep", "$L/$stale/docs") or die;
    symlink("$dir/keep/a", "$L/$stale/link") or die;
    chmod $mode, "$L/$stale" or die;
    return $L;
}

{
    my $L = stale_lock(0755);
    my $cwd = Cwd::getcwd();
    my $lock = Tokenlock->acquire($L, wait => 0);
    is_deeply([entries("$L/" . $lock->token)], [], 'the taken-over token is emptied, its subdirectory too');
    is_deeply([entries("$dir/keep")], [qw(a b docs)], 'the links were removed, not what they name');
    is(slurp("$dir/keep/a"), "canary\n", 'the victim\'s file is intact');
    is(Cwd::getcwd(), $cwd, 'the working directory is given back');
    $lock->release;
}
{
    my $L = stale_lock(0777);
    my $lock = Tokenlock->acquire($L, wait => 0);
    is_deeply([entries("$L/" . $lock->token)], [qw(a b docs link sub)],
        'a token writable by every user is not touched: it is judged before clearing');
    is_deeply([entries("$dir/keep")], [qw(a b docs)], 'the victim\'s files are intact');
    $lock->release;
}
SKIP: {
    skip 'a directory of another user needs root', 3 unless $> == 0;
    my $L = stale_lock(0755);
    chown 65534, -1, "$L/$stale/sub" or die;
    my $lock = Tokenlock->acquire($L, wait => 0);
    is_deeply([entries("$L/" . $lock->token)], ['sub'], 'a directory of another user is not entered');
    is_deeply([entries("$L/" . $lock->token . '/sub')], ['a'], 'and what is in it stays');
    is_deeply([entries("$dir/keep")], [qw(a b docs)], 'the victim\'s files are intact');
    $lock->release;
}
{
    # An unreadable working directory: the walk goes through O_PATH, or
    # does not clear; either way the working directory is given back.
    my $L = stale_lock(0755);
    my $cwd = Cwd::getcwd();
    mkdir "$dir/noread" or die;
    chdir "$dir/noread" or die;
    chmod 0311, "$dir/noread" or die;
    my $lock = Tokenlock->acquire($L, wait => 0);
    my @st = stat '.';
    my @want = stat "$dir/noread";
    is("$st[0]:$st[1]", "$want[0]:$want[1]", 'from an unreadable working directory, it is given back too');
    is_deeply([entries("$dir/keep")], [qw(a b docs)], 'the victim\'s files are intact');
    $lock->release;
    chdir $cwd or die;
}

done_testing();
