#!/usr/bin/perl
# Group sharing names one group (docs/security.md, Who is trusted): the
# group option or TOKENLOCK_GROUP, of which this user must be a member, or,
# with group write in TOKENLOCK_DIR_MODE and no group named, the group of a
# lock directory this user owns. Being in a group trusts nothing by itself.
# The cases with other users run as root, in a child that takes their ids.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use POSIX ();
use TokenlockTest;
use Tokenlock;

tokenlock_command();
my $dir = scratch_dir();
chmod 0755, $dir or die;
my $n = 0;
sub fresh { return "$dir/g" . ++$n . '.lock' }
sub code_of { my ($code) = @_; my $ok = eval { $code->(); 1 }; return $ok ? 'ok' : ref $@ ? $@->code : "died: $@" }
sub try_lock { my ($l, %o) = @_; return code_of(sub { Tokenlock->acquire($l, wait => 0, %o)->release }) }
sub mode_gid { my @st = lstat $_[0]; return @st ? sprintf('%04o %d', $st[2] & 07777, $st[5]) : 'missing' }

delete $ENV{TOKENLOCK_GROUP};
delete $ENV{TOKENLOCK_DIR_MODE};
my ($mine) = split ' ', $);
my %in = map { $_ => 1 } split ' ', $);
my $foreign = (grep { !$in{$_} } 65534, 4244, 4245)[0];

# --- a named group: the caller's, given to what is made -------------------------------
{
    my $L = fresh();
    is(try_lock($L, group => $mine), 'ok', 'the group option naming a group of ours (by gid)');
    is(mode_gid($L), sprintf('0775 %d', $mine), 'the lock directory made gets that group and group write (0755 | 0070)');
    is(mode_gid("$L/lockfile"), sprintf('0775 %d', $mine), 'and so does its token');
    my $name = getgrgid($mine);
    {
        local $ENV{TOKENLOCK_GROUP} = defined $name ? $name : $mine;
        is(try_lock($L), 'ok', 'TOKENLOCK_GROUP naming it (by name) uses it');
        Tokenlock::update_file("$dir/g.data", sub { "x\n" }, lock => $L);
        my ($tok) = grep { /\Alockfile/ } entries($L);
        is(mode_gid("$L/$tok/w"), sprintf('0775 %d', $mine), 'the workspace an update makes is shared the same way');
        local $ENV{TOKENLOCK_GROUP} = 'no-such-group-tokenlock';
        is(try_lock($L, group => $mine), 'ok', 'the option wins over TOKENLOCK_GROUP');
        my $M = fresh();
        is(try_lock($M), 'bad_argument', 'TOKENLOCK_GROUP naming an unknown group: bad_argument');
        like($@->message, qr/no-such-group-tokenlock.*which this host does not know/, 'saying so') if ref $@;
        ok(!-e $M, 'and nothing was made');
    }
  SKIP: {
        skip 'every gid tried is one of ours', 3 unless defined $foreign;
        my $M = fresh();
        is(try_lock($M, group => $foreign), 'bad_argument', 'naming a group this user is not in: bad_argument');
        like($@->message, qr/gid $foreign.*is not a member of it/, 'saying so') if ref $@;
        ok(!-e $M, 'and nothing was made');
    }
}

# --- no group named ----------------------------------------------------------------------
{
    my $L = fresh();
    is(try_lock($L), 'ok', 'made 0755 without a group');
    chmod 0775, $L or die;
    is(try_lock($L), 'untrusted', 'our lock directory with group write, no group chosen: refused');
    like($@->message, qr/which is not the group chosen for sharing.*TOKENLOCK_GROUP=/, 'saying how to name one') if ref $@;
    {
        local $ENV{TOKENLOCK_DIR_MODE} = '0775';
        is(try_lock($L), 'ok', 'TOKENLOCK_DIR_MODE=0775: the group of our own lock directory is chosen');
    }
    is(try_lock($L, group => $mine), 'ok', 'as it is when named');
    chmod 0777, $L or die;
    is(try_lock($L, group => $mine), 'untrusted', 'writable by every user: refused even with a named group');
}

# --- other users: root only ----------------------------------------------------------------
# Runs $code in a child as uid $uid with the groups @$gids (the first the
# effective one); returns what it returns.
sub as_user {
    my ($uid, $gids, $code) = @_;
    pipe(my $r, my $w) or die "pipe: $!";
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        close $r;
        $) = join(' ', $gids->[0], @$gids);
        $> = $uid;
        my $out = $> == $uid ? eval { $code->() } : "cannot become uid $uid";
        $out = 'died: ' . (ref $@ ? $@->message : $@) unless defined $out;
        print $w $out;
        close $w;
        POSIX::_exit(0);
    }
    close $w;
    my $out = do { local $/; <$r> };
    waitpid($pid, 0);
    return $out;
}
sub report { my ($what) = @_; return $what . (ref $@ ? '|' . $@->message : '') }

SKIP: {
    skip 'the cases with other users need root', 14 unless $> == 0;
    my ($me, $other, $shared, $second) = (4242, 4243, 4250, 4251);
    my @groups = ($shared, $second);

    # A lock directory of another user in a group the caller is merely in.
    my $L = fresh();
    mkdir $L or die;
    mkdir "$L/lockfile" or die;
    chown $other, $second, $L, "$L/lockfile" or die;
    chmod 0775, $L, "$L/lockfile" or die;
    my $got = as_user($me, \@groups, sub { local $ENV{TOKENLOCK_DIR_MODE} = '0775'; report(try_lock($L)) });
    like($got, qr/\Auntrusted\|.*refusing the lock directory \(owner uid $other/, 'another user\'s lock directory in a group we are merely in: refused');
    is(mode_gid($L), sprintf('0775 %d', $second), 'and left as it was');
    is(entries($L), 1, 'nothing in it touched');
    like(as_user($me, \@groups, sub { report(try_lock($L, group => $shared)) }), qr/\Auntrusted\|.*not the group chosen/,
        'naming another group of ours does not trust it either');
    is(as_user($me, \@groups, sub { report(try_lock($L, group => $second)) }), 'ok',
        'naming its group trusts another user\'s lock directory');

    # Our own lock directory, group-writable by a group we did not choose.
    my $M = fresh();
    mkdir $M or die;
    mkdir "$M/lockfile" or die;
    chown $me, $second, $M, "$M/lockfile" or die;
    chmod 0775, $M, "$M/lockfile" or die;
    like(as_user($me, \@groups, sub { report(try_lock($M, group => $shared)) }), qr/\Auntrusted\|.*writable by group/,
        'our lock directory writable by another group than the named one: refused');
    is(as_user($me, \@groups, sub { local $ENV{TOKENLOCK_DIR_MODE} = '0775'; report(try_lock($M)) }), 'ok',
        'with TOKENLOCK_DIR_MODE=0775 its own group is chosen');

    # Tokens of another user inside our lock directory: trusted in the
    # chosen group only.
    for my $case ([$second, 'ok', 'in the chosen group: the update goes through it'],
        [$shared, 'untrusted', 'in another group of ours: refused'])
    {
        my ($gid, $want, $what) = @$case;
        my $D = fresh();
        mkdir $D or die;
        mkdir "$D/lockfile" or die;
        chown $me, $second, $D or die;
        chown $other, $gid, "$D/lockfile" or die;
        chmod 0775, $D, "$D/lockfile" or die;
        mkdir "$dir/data$n" or die;
        my $target = "$dir/data$n/t";
        spit($target, "old\n");
        chown $me, $second, "$dir/data$n", $target or die;
        my $r = as_user($me, \@groups, sub {
            local $ENV{TOKENLOCK_DIR_MODE} = '0775';
            report(code_of(sub { Tokenlock::update_file($target, sub { "new\n" }, lock => $D) }));
        });
        like($r, qr/\A\Q$want\E(\z|\|.*refusing the lock's token)/, "a token of another user $what");
        is(slurp($target), $want eq 'ok' ? "new\n" : "old\n", $want eq 'ok' ? 'written' : 'the target untouched');
        is_deeply([entries($D)], ['lockfile'], 'the lock is free again');
    }
}

done_testing();
