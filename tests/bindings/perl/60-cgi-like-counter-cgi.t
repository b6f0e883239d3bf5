#!/usr/bin/perl
# counter.pl against counter.cgi: byte for byte the same responses to the
# same requests, and one counter counted by both at once. Needs a built
# counter.cgi (TOKENLOCK_COUNTER_CGI, else the build tree's).
use strict;
use warnings;
use FindBin;
# In the source tree, beside the module's own tests: what they run
# (counter.pl, the legacy procedure, counter.cgi) is not part of the module.
use lib "$FindBin::Bin/../../../bindings/perl/t/lib", "$FindBin::Bin/../../../bindings/perl/lib";
use Test::More;
use TokenlockTest;

my $cmd  = tokenlock_command();
my $repo = TokenlockTest::repo_dir();
my $perl_cgi = "$repo/cgi-examples/perl/counter.pl";
my $cxx_cgi  = $ENV{TOKENLOCK_COUNTER_CGI};
$cxx_cgi = "$repo/build/cgi-examples/counter/counter.cgi" unless defined $cxx_cgi && length $cxx_cgi;
# Named by the caller (ctest does): it must be there.
BAIL_OUT("TOKENLOCK_COUNTER_CGI names $cxx_cgi, which is not executable")
  if !-x $cxx_cgi && $ENV{TOKENLOCK_COUNTER_CGI};
plan(skip_all => "no counter.cgi at $cxx_cgi: build it, or set TOKENLOCK_COUNTER_CGI") unless -x $cxx_cgi;

my $top = scratch_dir();

sub run_cgi {
    my ($prog, $dir, $method, $query, %env) = @_;
    my ($st, $out, $err) = capture(
        [$prog],
        env => {
            REQUEST_METHOD            => $method,
            QUERY_STRING              => $query,
            TOKENLOCK_COUNTER_DIR     => $dir,
            TOKENLOCK_COUNTER_SYNC    => 'none',
            TOKENLOCK_COUNTER_WAIT_MS => undef,
            TOKENLOCK_COUNTER_REDIS   => undef,
            TOKENLOCK_COUNTER_ETCD    => undef,
            TOKENLOCK_COUNTER_LOCK    => undef,
            CONTENT_LENGTH            => undef,
            PERL5LIB                  => undef,
            PERL5OPT                  => undef,
            %env,
        },
    );
    return ($st, $out, $err);
}

# Two data directories in the same state, one for each program.
my %dir = (cxx => "$top/cxx", perl => "$top/perl");
for my $d (values %dir) {
    mkdir $d or die "mkdir $d: $!";
    TokenlockTest::spit("$d/bad.count",  "garbage\n");
    TokenlockTest::spit("$d/big.count",  "9999999\n");
    TokenlockTest::spit("$d/max.count",  "18446744073709551615\n");
}

my @requests = (
    ['GET', ''], ['GET', 'id=home'], ['GET', 'id=home&format=json'], ['GET', 'id=home&format=svg'],
    ['GET', 'id=home&format=text'], ['GET', 'id=home&peek=1'], ['GET', 'id=home&peek=0&format=json'],
    ['HEAD', 'id=home&format=svg'], ['HEAD', 'id=none'], ['GET', 'id=none&peek=1&format=svg'],
    ['GET', 'id=big&format=svg'], ['GET', 'id=big&format=svg'],
    ['GET', 'id=bad'], ['GET', 'id=bad&peek=1'], ['HEAD', 'id=bad'],
    ['GET', 'id=max'],
    ['GET', 'id=a&id=b'], ['GET', 'foo=1&bar=2'], ['GET', 'id=bad.id'], ['GET', 'id='], ['GET', 'id'],
    ['GET', 'id=a+b'], ['GET', 'format=xml'], ['GET', 'peek=2'], ['GET', 'id=%zz'], ['GET', 'id=a%4'],
    ['GET', 'id=a%00'], ['GET', '=x'], ['GET', 'id=' . ('a' x 65)], ['GET', 'id=' . ('a' x 257)],
    ['GET', ('n' x 33) . '=1'], ['GET', join('&', map { "p$_=1" } 1 .. 17)], ['GET', 'x' x 2049],
    ['GET', "unknown%0A%E2%98%BA=1"], ['GET', 'id=h%6Fme&&'],
    ['POST', 'id=home'], ['PUT', ''], ['', 'id=home'],
);

for my $req (@requests) {
    my ($method, $query) = @$req;
    my $shown = "$method ?" . (length $query > 40 ? substr($query, 0, 37) . '...' : $query);
    my ($cst, $cout) = run_cgi($cxx_cgi,  $dir{cxx},  $method, $query);
    my ($pst, $pout) = run_cgi($perl_cgi, $dir{perl}, $method, $query);
    is($pst, $cst, "$shown: the same exit status");
    is($pout, $cout, "$shown: the same response, byte for byte");
}

for my $env (
    [TOKENLOCK_COUNTER_WAIT_MS => 'soon'], [TOKENLOCK_COUNTER_WAIT_MS => '700000'],
    [TOKENLOCK_COUNTER_SYNC => 'fast'], [TOKENLOCK_COUNTER_DIR => "$top/missing"],
  )
{
    for my $method ('GET', 'HEAD') {
        my ($c) = (run_cgi($cxx_cgi, $dir{cxx}, $method, 'id=home', @$env))[1];
        my ($p) = (run_cgi($perl_cgi, $dir{perl}, $method, 'id=home', @$env))[1];
        is($p, $c, "$env->[0]=$env->[1], $method: the same response");
    }
}

for my $name (qw(home bad big max none default)) {
    is(TokenlockTest::slurp("$dir{perl}/$name.count"), TokenlockTest::slurp("$dir{cxx}/$name.count"),
        "afterwards $name.count holds the same in both directories");
}

# --- one counter, both programs ---------------------------------------------------
my $shared = "$top/shared";
mkdir $shared or die $!;
my @seen;
for my $i (1 .. 10) {
    for my $prog ($cxx_cgi, $perl_cgi) {
        my ($st, $out) = run_cgi($prog, $shared, 'GET', 'id=both');
        push @seen, $out =~ /\r\n\r\n(\d+)\n\z/ ? $1 : "bad: $out";
    }
}
is_deeply(\@seen, [1 .. 20], 'taking turns, the two programs count one counter');

# At once, with the default durability.
{
    my ($PER, $HITS) = (4, 8);
    pipe(my $gate_r, my $gate_w) or die $!;
    my @pids;
    for my $prog (($cxx_cgi) x $PER, ($perl_cgi) x $PER) {
        push @pids, fork_worker(sub {
            close $gate_w;
            sysread($gate_r, my $buf, 1);
            for (1 .. $HITS) {
                my ($st, $out, $err) = run_cgi($prog, $shared, 'GET', 'id=mixed', TOKENLOCK_COUNTER_SYNC => 'file_and_dir');
                die "$prog: $out $err" unless $out =~ /\AStatus: 200 /;
            }
        });
    }
    close $gate_r;
    close $gate_w;
    is((grep { reap($_) == 0 } @pids), 2 * $PER, "$PER clients of each program, $HITS hits each: all answered 200");
    is(TokenlockTest::slurp("$shared/mixed.count"), (2 * $PER * $HITS) . "\n", 'and the shared counter is exact');
}

# --- a stale read on a network filesystem ------------------------------------------
# `tokenlock incr` exit 75, counter.cgi's 503: the client kept serving an
# old version and nothing was written. A local disk never serves one, so a
# stand-in increment, loaded before the script, gives stale_data as the
# module gives it: 503 with Retry-After, as counter.cgi answers.
{
    my $stub_lib = "$top/stub-lib";
    mkdir $stub_lib or die $!;
    TokenlockTest::spit("$stub_lib/TokenlockStale.pm", <<"PM");
package TokenlockStale;
use lib '$repo/bindings/perl/lib';
use Tokenlock;
no warnings 'redefine';
*Tokenlock::increment = sub {
    die Tokenlock::Error->new(code => 'stale_data', status => 75,
        message => "tokenlock: read \$_[0]: this client keeps reading a version older than the one the last update committed");
};
1;
PM
    mkdir "$top/net" or die $!;
    my ($st, $out, $err) = run_cgi($perl_cgi, "$top/net", 'GET', 'id=net', PERL5OPT => "-I$stub_lib -MTokenlockStale");
    like($out, qr/\AStatus: 503 .*\r\nRetry-After: 1\r\n(?:[^\r]*\r\n)*\r\nthe counter is busy; try again\n\z/s,
        'stale data: 503 with Retry-After');
    like($err, qr/keeps reading a version older/, 'stale data: the log says why');
    ok(!-e "$top/net/net.count", 'stale data: nothing written');
}

# --- a data directory that cannot be flushed --------------------------------------
# Write-only for the CGI's user (mode 0333, as upload drop directories are):
# each commit is made, but the directory cannot be opened to flush it. The
# hit is counted, so both programs answer 200 with its count, and log the
# fix. Root opens any directory: the programs then run as nobody.
{
    my $drop = "$top/drop";
    mkdir $drop or die $!;
    chmod 0755, $top;
    chmod 0333, $drop;
    my @as = $> == 0 ? ('setpriv', '--reuid=65534', '--regid=65534', '--clear-groups') : ();
    my (@seen, @logs);
    for my $prog ($cxx_cgi, $perl_cgi, $cxx_cgi, $perl_cgi) {
        my ($st, $out, $err) = capture([ @as, $prog ], env => {
            REQUEST_METHOD => 'GET', QUERY_STRING => 'id=drop&format=json', TOKENLOCK_COUNTER_DIR => $drop,
            TOKENLOCK_COUNTER_SYNC => 'file_and_dir', PERL5LIB => undef, PERL5OPT => undef });
        push @seen, $out;
        push @logs, $err;
    }
    chmod 0755, $drop;
    (my $first = $seen[0]) =~ s/"count":1\b/"count":N/;
    for my $n (1 .. 4) {
        (my $got = $seen[$n - 1]) =~ s/"count":$n\b/"count":N/;
        is($got, $first, "unflushable directory, hit $n: 200 with the count, as counter.cgi answers");
        like($logs[$n - 1], qr/\Qgive this user read permission on $drop\E/, "unflushable directory, hit $n: the log gives the fix");
    }
    like($first, qr/\AStatus: 200 .*"count":N/s, 'unflushable directory: the answer is 200 with the count');
    is(TokenlockTest::slurp("$drop/drop.count"), "4\n", 'unflushable directory: every hit is counted');
    is(scalar(leftovers($drop, 'drop.count')), 0, 'unflushable directory: no temporary file is left');
}

done_testing();
