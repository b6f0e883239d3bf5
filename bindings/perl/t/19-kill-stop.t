#!/usr/bin/perl
# Holders that are killed or stopped. Native workers and the command
# increment one counter while native holders are killed with SIGKILL in
# and out of their critical sections: no value is handed out twice, and
# none is lost. A holder stopped past its lease is taken over, and its
# late commit is fenced off.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Test::More;
use POSIX ();
use TokenlockTest;

use Tokenlock qw(increment);

my $cmd = tokenlock_command();
my $dir = scratch_dir();

# --- kill -9 among native and command incrementers -----------------------------------
{
    my $c = "$dir/k.count";
    my $log = "$dir/values";
    # Each worker appends the values it was handed, one line each, with
    # O_APPEND: lines of different workers never mix.
    my $native = sub {
        fork_worker(sub {
            open(my $fh, '>>', $log) or die;
            $fh->autoflush(1);
            for (1 .. 400) { my $v = increment($c, wait => 60, sync => 'none'); syswrite $fh, "$v\n" }
        });
    };
    # Without the command the native workers count alone.
    command_skip('incrementing with the command among them') unless $cmd;
    my @command = !$cmd ? () : map {
        fork_worker(sub {
            open(my $fh, '>>', $log) or die;
            for (1 .. 60) {
                my ($st, $out, $err) = capture([$cmd, 'incr', '-w', '60', '--sync', 'none', $c]);
                die "incr: $err" if $st;
                syswrite $fh, $out;
            }
        });
    } 1 .. 2;
    my @native = map { $native->() } 1 .. 3;
    my $killed = 0;
    for my $round (1 .. 6) {
        # Let the count move on, then kill a native worker wherever it is.
        my $start = Tokenlock::read_counter($c) || 0;
        my $give_up = time + 60;
        while (1) {
            my $now = Tokenlock::read_counter($c) || 0;
            last if $now >= $start + 20;
            BAIL_OUT("the counter stayed at $now for a minute: the workers are stuck") if time > $give_up;
            select(undef, undef, undef, 0.001);
        }
        my $victim = shift @native;
        kill 'KILL', $victim;
        waitpid($victim, 0);
        $killed++;
        push @native, $native->();
    }
    is(reap($_), 0, 'a surviving worker ended well') for @native, @command;
    my @values = split /\n/, slurp($log);
    my %seen;
    my @twice = grep { $seen{$_}++ } @values;
    is_deeply(\@twice, [], 'no value was handed out twice');
    my $final = Tokenlock::read_counter($c);
    cmp_ok($final, '>=', scalar @values, 'every value handed out is counted');
    # A killed worker may have committed one increment it never reported.
    cmp_ok($final, '<=', @values + $killed, 'and at most one unreported increment per killed worker');
    my $max = 0;
    $max = $_ > $max ? $_ : $max for @values;
    is($final >= $max, 1, 'the counter is at least the highest value handed out');
    my @missing = grep { !$seen{$_} } 1 .. $final;
    cmp_ok(scalar @missing, '<=', $killed, 'the values nobody reported are no more than the killed workers');
    is(lock_status("$c.lock")->{state}, 'free', 'the lock is free at the end');
}

# --- a holder stopped past its lease: taken over, its commit fenced off ---------------------
{
    my $f = "$dir/page";
    spit($f, "first\n");
    pipe(my $in_r, my $in_w) or die;
    pipe(my $go_r, my $go_w) or die;
    pipe(my $res_r, my $res_w) or die;
    my $holder = fork_worker(sub {
        close $in_r;
        close $go_w;
        close $res_r;
        my $ok = eval {
            Tokenlock::Update::_native_update('write', $f, "$f.lock", sub {
                syswrite $in_w, "in\n";
                # Stopped here by the parent; then told to go on.
                read_line($go_r);
                return ("late\n");
            }, sync => 'file', wait => 5, lease => 1);
            1;
        };
        syswrite $res_w, ($ok ? 'written' : ref $@ ? $@->code : "died: $@") . "\n";
    });
    close $in_w;
    close $go_r;
    close $res_w;
    is(read_line($in_r), 'in', 'the holder is in its critical section');
    kill 'STOP', $holder;
    # Its lease (1 s) and the skew allowance (1 s) run out; the command
    # (or the module, without one) then takes the lock over and writes.
    my ($st, $err) = (0, '');
    if ($cmd) { ($st, undef, $err) = capture([$cmd, 'write', '--lock', "$f.lock", '-w', '10', $f], stdin => "taker\n") }
    else { eval { Tokenlock::write_file($f, "taker\n", lock => "$f.lock", wait => 10); 1 } or ($st, $err) = (1, $@) }
    is($st, 0, 'the taker took the lock over from the stopped holder and wrote') or diag($err);
    kill 'CONT', $holder;
    syswrite $go_w, "go\n";
    close $go_w;
    is(read_line($res_r), 'lock_lost', 'the stopped holder, continued, is refused at its commit: lock_lost');
    is(reap($holder), 0, 'it ended well');
    is(slurp($f), "taker\n", 'the taker\'s data is intact');
    my @left = grep { /\.tmp\./ } map { s{.*/}{}r } glob("$dir/.page.tmp.* $f.lock/*/w/.page.tmp.*");
    is_deeply(\@left, [], 'no temporary file is left');
}

done_testing();
