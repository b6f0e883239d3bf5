#!/usr/bin/perl
# cgi-examples/perl/counter.pl run as a CGI program, installed as on a host:
# the script with Tokenlock.pm and its directory Tokenlock/ beside it. Every
# status and format.
use strict;
use warnings;
use FindBin;
# In the source tree, beside the module's own tests: what they run
# (counter.pl, the legacy procedure, counter.cgi) is not part of the module.
use lib "$FindBin::Bin/../../../bindings/perl/t/lib", "$FindBin::Bin/../../../bindings/perl/lib";
use File::Copy ();
use Test::More;
use TokenlockTest;

use Tokenlock ();

my $cmd  = tokenlock_command();
my $repo = TokenlockTest::repo_dir();
my $src  = "$repo/cgi-examples/perl/counter.pl";
ok(-x $src, 'counter.pl is executable');

my $top  = scratch_dir();
my $bin  = "$top/cgi-bin";
my $data = "$top/data";
mkdir $_ or die "mkdir $_: $!" for $bin, $data;
File::Copy::copy($src, "$bin/counter.pl") or die "copy: $!";
copy_module($bin);
chmod 0755, "$bin/counter.pl";

# Runs the CGI; returns { status, reason, headers (lower-case names), body,
# log }. %env adds to or (undef) removes from the CGI's environment.
sub cgi {
    my (%o) = @_;
    my $script = delete $o{script} || "$bin/counter.pl";
    my %env = (
        GATEWAY_INTERFACE     => 'CGI/1.1',
        SERVER_PROTOCOL       => 'HTTP/1.1',
        REQUEST_METHOD        => 'GET',
        QUERY_STRING          => '',
        TOKENLOCK_COUNTER_DIR => $data,
        TOKENLOCK_COUNTER_SYNC => 'none',
        TOKENLOCK_COUNTER_WAIT_MS => undef,
        TOKENLOCK_COUNTER_REDIS => undef,
        TOKENLOCK_COUNTER_ETCD => undef,
        TOKENLOCK_COUNTER_LOCK => undef,
        CONTENT_LENGTH => undef,
        # A web server gives a CGI program no PERL5LIB; prove -l would.
        PERL5LIB => undef,
        PERL5OPT => undef,
        %{ $o{env} || {} },
    );
    my ($st, $out, $err) = capture([$script], env => \%env, stdin => $o{stdin});
    my %r = (exit => $st, log => $err, raw => $out);
    my ($head, $body) = split /\r\n\r\n/, $out, 2;
    $r{body} = $body;
    for my $line (split /\r\n/, defined $head ? $head : '') {
        my ($n, $v) = $line =~ /\A([^:]+): (.*)\z/ or next;
        $r{headers}{ lc $n } = $v;
    }
    @r{qw(status reason)} = ($r{headers}{status} || '') =~ /\A(\d{3}) (.*)\z/;
    return \%r;
}

sub get { my ($q, %o) = @_; return cgi(%o, env => { QUERY_STRING => $q, %{ $o{env} || {} } }) }

# What every response must have: a status, Cache-Control, a correct
# Content-Length, no server path in the body, exit status 0.
sub check_response {
    my ($r, $status, $name) = @_;
    is($r->{status}, $status, "$name: status $status") or diag("log: $r->{log}\nresponse: $r->{raw}");
    is($r->{exit}, 0, "$name: the program exits 0");
    is($r->{headers}{'cache-control'}, 'no-store', "$name: Cache-Control: no-store");
    my $len = $r->{headers}{'content-length'};
    if (($r->{headers}{_method} || '') ne 'HEAD') {
        is($len, length(defined $r->{body} ? $r->{body} : ''), "$name: Content-Length is the body's length");
    }
    my $body = defined $r->{body} ? $r->{body} : '';
    unlike($body, qr/\Q$top\E|\/tmp\//, "$name: no server path in the body");
    unlike($body, qr/\Q$cmd\E/, "$name: nor the command's") if $cmd;
}

sub count_of { my $v = TokenlockTest::slurp("$data/$_[0].count"); return $v }

# --- 200, each format ------------------------------------------------------------
{
    my $r = get('');
    check_response($r, 200, 'no query');
    is($r->{body}, "1\n", 'counts counter "default"');
    is($r->{headers}{'content-type'}, 'text/plain; charset=utf-8', 'as text');
    is(count_of('default'), "1\n", 'in DIR/default.count');
    ok(-d "$data/default.count.lock", 'locked by DIR/default.count.lock');

    $r = get('id=home');
    check_response($r, 200, 'id=home');
    is($r->{body}, "1\n", 'a counter of its own');
    is(get('id=home&format=text')->{body}, "2\n", 'format=text');

    $r = get('id=home&format=json');
    check_response($r, 200, 'format=json');
    is($r->{headers}{'content-type'}, 'application/json', 'application/json');
    is($r->{body}, qq({"id":"home","count":3}\n), 'the JSON shape of counter.cgi');

    $r = get('format=svg&id=home');
    check_response($r, 200, 'format=svg');
    is($r->{headers}{'content-type'}, 'image/svg+xml', 'image/svg+xml');
    is($r->{body}, <<'SVG', 'the image of counter.cgi, six digits');
<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="78" height="24" viewBox="0 0 78 24" role="img" aria-label="4 hits">
<title>4 hits</title>
<rect width="78" height="24" rx="3" fill="#1d1f21"/>
<text x="39" y="17" fill="#b5f566" font-size="16" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" text-anchor="middle" letter-spacing="1">000004</text>
</svg>
SVG
    TokenlockTest::spit("$data/big.count", "1234567\n");
    like(get('id=big&format=svg')->{body}, qr/width="89" .*viewBox="0 0 89 24".*x="44" .*>1234568<\/text>/s,
        'seven digits widen the image');

    # Percent-encoding and '+' in values, as the parser decodes them.
    is(get('id=h%6Fme&format=%74ext')->{body}, "5\n", 'percent-encoded values are decoded');
    is(get('id=home&&format=text&')->{body}, "6\n", 'empty pieces are ignored');

    # peek and HEAD never count.
    $r = get('id=home&peek=1');
    check_response($r, 200, 'peek=1');
    is($r->{body}, "6\n", 'peek=1 shows the value');
    is(count_of('home'), "6\n", 'without counting');
    is(get('id=home&peek=0')->{body}, "7\n", 'peek=0 counts');

    $r = cgi(env => { REQUEST_METHOD => 'HEAD', QUERY_STRING => 'id=home&format=json' });
    $r->{headers}{_method} = 'HEAD';
    check_response($r, 200, 'HEAD');
    is($r->{body}, '', 'HEAD: no body');
    is($r->{headers}{'content-length'}, length(qq({"id":"home","count":7}\n)), 'HEAD: the length of the body GET would give');
    is(count_of('home'), "7\n", 'HEAD does not count');

    $r = get('id=never&peek=1');
    is($r->{body}, "0\n", 'peek of a counter that does not exist: 0');
    ok(!-e "$data/never.count" && !-e "$data/never.count.lock", 'and creates nothing');
    is(cgi(env => { REQUEST_METHOD => 'HEAD', QUERY_STRING => 'id=never' })->{status}, 200, 'HEAD of it: 200');
    ok(!-e "$data/never.count", 'creating nothing either');

    my $id64 = 'A-z_9' x 12 . 'abcd';
    is(get("id=$id64")->{body}, "1\n", 'an id of 64 characters');
}

# --- 400 --------------------------------------------------------------------------
{
    my @names = (map { "p$_=1" } 1 .. 17);
    for my $case (
        ['id=a&id=b',             'repeated parameter'],
        ['id=a&format=json&id=a', 'repeated parameter'],
        ['foo=1',                 'unknown parameter foo'],
        ['id=a&zzz=1&aaa=2',      'unknown parameter aaa'],
        ['id=bad.id',             "id must be 1 to 64 letters, digits, '_' or '-'"],
        ['id=',                   "id must be 1 to 64 letters, digits, '_' or '-'"],
        ['id',                    "id must be 1 to 64 letters, digits, '_' or '-'"],
        ['id=..%2Fetc',           "id must be 1 to 64 letters, digits, '_' or '-'"],
        ['id=a+b',                "id must be 1 to 64 letters, digits, '_' or '-'"],
        ['id=' . ('a' x 65),      "id must be 1 to 64 letters, digits, '_' or '-'"],
        ['format=xml',            'format must be text, json or svg'],
        ['format=',               'format must be text, json or svg'],
        ['peek=2',                'peek must be 0 or 1'],
        ['peek=yes',              'peek must be 0 or 1'],
        ['id=%zz',                'invalid percent-encoding'],
        ['id=a%4',                'invalid percent-encoding'],
        ['id=a%',                 'invalid percent-encoding'],
        ['id=a%00b',              'invalid percent-encoding'],
        ['%=1',                   'invalid percent-encoding'],
        ['=x',                    'parameter without a name'],
        ['id=' . ('a' x 257),     'parameter too long'],
        [('n' x 33) . '=1',       'parameter too long'],
        [join('&', @names),       'too many parameters'],
        ['id=' . ('a' x 2046),    'query string too long'],
      )
    {
        my ($q, $reason) = @$case;
        my $shown = length $q > 40 ? substr($q, 0, 37) . '...' : $q;
        opendir(my $dh, $data) or die $!;
        my @before = sort readdir $dh;
        closedir $dh;
        my $r = get($q);
        check_response($r, 400, "?$shown");
        is($r->{body}, "$reason\n", "?$shown: \"$reason\"");
        opendir($dh, $data) or die $!;
        is_deeply([sort readdir $dh], \@before, "?$shown: no file created");
        closedir $dh;
    }
}

# --- 405 ----------------------------------------------------------------------------
for my $m ('POST', 'PUT', 'DELETE', 'OPTIONS', '') {
    my $body = $m eq 'POST' ? ('x=1&' x 5000) : undef;
    my $r = cgi(
        env   => { REQUEST_METHOD => $m, QUERY_STRING => 'id=home', CONTENT_LENGTH => defined $body ? length $body : undef },
        stdin => $body,
    );
    check_response($r, 405, "method '$m'");
    is($r->{headers}{allow}, 'GET, HEAD', "method '$m': Allow: GET, HEAD");
    is($r->{body}, "only GET and HEAD are allowed\n", "method '$m': the reason");
}
is(count_of('home'), "7\n", 'no other method counted');

# --- 503: the counter stays busy ---------------------------------------------------
{
    TokenlockTest::spit("$data/busy.count", "41\n");
    my $lock = Tokenlock->acquire("$data/busy.count.lock");
    my $t = time;
    my $r = get('id=busy', env => { TOKENLOCK_COUNTER_WAIT_MS => 200 });
    my $took = time - $t;
    check_response($r, 503, 'a busy counter');
    SKIP: {
        my ($st, $help) = $cmd ? capture([$cmd, 'incr', '--help']) : (0, '--wait');
        skip('this tokenlock incr takes no -w: it waits its own 10 s', 1) unless $help =~ /--wait/;
        cmp_ok($took, '<', 5, 'after about the wait budget (200 ms), not the command\'s default 10 s');
    }
    is($r->{headers}{'retry-after'}, '1', 'Retry-After: 1');
    is($r->{body}, "the counter is busy; try again\n", 'the reason');
    like($r->{log}, qr/\Acounter\.pl: .*timed out.*\n\z/, 'the log says it timed out, in one line');
    is(count_of('busy'), "41\n", 'nothing was counted');
    $lock->release;
    is(get('id=busy')->{body}, "42\n", 'once free, it counts again');
}

# --- 500 --------------------------------------------------------------------------------
{
    TokenlockTest::spit("$data/bad.count", "garbage\n");
    for my $q ('id=bad', 'id=bad&peek=1') {
        my $r = get($q);
        check_response($r, 500, "a corrupt counter, ?$q");
        is($r->{body}, "the counter file is corrupt; it was left as it is\n", "?$q: the reason");
        like($r->{log}, qr/\Acounter\.pl: .*\Q$data\E\/bad\.count.*unsigned decimal/, "?$q: the log names the file and the cause");
        is(count_of('bad'), "garbage\n", "?$q: the file is left as it is");
        is(scalar(leftovers($data, 'bad.count')), 0, "?$q: no temporary file is left");
    }
    my $r = cgi(env => { REQUEST_METHOD => 'HEAD', QUERY_STRING => 'id=bad' });
    is($r->{status}, 500, 'HEAD of a corrupt counter: 500');
    is($r->{body}, '', 'without a body');

    $r = get('id=x', env => { TOKENLOCK_COUNTER_DIR => "$top/no-such-dir" });
    check_response($r, 500, 'a missing data directory');
    is($r->{body}, "internal error; see the server's error log\n", 'the reason');
    like($r->{log}, qr/\Q$top\E\/no-such-dir/, 'the log names the directory');
    ok(!-e "$top/no-such-dir", 'which is not created');

    for my $env (
        [TOKENLOCK_COUNTER_WAIT_MS => 'soon',   qr/TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000 milliseconds, not "soon"/],
        [TOKENLOCK_COUNTER_WAIT_MS => '-1',     qr/TOKENLOCK_COUNTER_WAIT_MS must be/],
        [TOKENLOCK_COUNTER_WAIT_MS => '600001', qr/TOKENLOCK_COUNTER_WAIT_MS must be/],
        [TOKENLOCK_COUNTER_WAIT_MS => '5ms',    qr/TOKENLOCK_COUNTER_WAIT_MS must be/],
        [TOKENLOCK_COUNTER_SYNC    => 'fast',   qr/TOKENLOCK_COUNTER_SYNC must be none, file or file_and_dir, not "fast"/],
        [TOKENLOCK_COUNTER_REDIS   => 'redis://127.0.0.1:6379', qr/TOKENLOCK_COUNTER_REDIS is set/],
        [TOKENLOCK_COUNTER_ETCD    => 'etcd://127.0.0.1:2379',  qr/TOKENLOCK_COUNTER_ETCD is set/],
        [TOKENLOCK_COUNTER_LOCK    => 'redis://127.0.0.1:6379', qr/TOKENLOCK_COUNTER_LOCK is set, but counter\.pl locks through lock directories/],
        [TOKENLOCK_COUNTER_LOCK    => '/srv/locks',             qr/TOKENLOCK_COUNTER_LOCK is set/],
      )
    {
        my ($k, $v, $re) = @$env;
        for my $m ('GET', 'POST') {
            my $r = cgi(env => { REQUEST_METHOD => $m, QUERY_STRING => 'id=home', $k => $v });
            check_response($r, 500, "$k=$v, $m");
            is($r->{body}, "the counter is misconfigured; see the server's error log\n", "$k=$v, $m: misconfigured");
            like($r->{log}, qr/\Acounter\.pl: misconfigured: /, "$k=$v, $m: logged as such");
            like($r->{log}, $re, "$k=$v, $m: naming the variable");
        }
    }
    is(count_of('home'), "7\n", 'a misconfigured counter counts nothing');
    is(get('id=home', env => { TOKENLOCK_COUNTER_WAIT_MS => ' +0' })->{body}, "8\n", 'TOKENLOCK_COUNTER_WAIT_MS=" +0" is valid, as strtol reads it');
}

# --- finding the module; no command is needed ----------------------------------------
{
    # The module counts natively: no tokenlock command anywhere is fine.
    my $r = get('id=home', env => { TOKENLOCK_COMMAND => undef, PATH => "$top/empty", HOME => "$top/home" });
    check_response($r, 200, 'no tokenlock command anywhere');
    is($r->{body}, "9\n", 'counts all the same');

    # As suEXEC runs it: by its bare name, in its own directory.
    chdir $bin or die $!;
    my ($st, $out, $err) = capture([$^X, 'counter.pl'],
        env => { REQUEST_METHOD => 'GET', QUERY_STRING => 'id=suexec', TOKENLOCK_COUNTER_DIR => $data,
                 PERL5LIB => undef, PERL5OPT => undef,
                 TOKENLOCK_COMMAND => undef, PATH => "$top/empty", HOME => "$top/home" });
    chdir '/';
    like($out, qr/\AStatus: 200 OK\r\n.*\r\n\r\n1\n\z/s, 'run by its bare name in its directory, it finds the module')
      or diag($err);

    my $alone = "$top/alone";
    mkdir $alone or die $!;
    File::Copy::copy($src, "$alone/counter.pl") or die $!;
    chmod 0755, "$alone/counter.pl";
    $r = get('id=home', script => "$alone/counter.pl");
    check_response($r, 500, 'without Tokenlock.pm');
    is($r->{body}, "the counter is misconfigured; see the server's error log\n", 'misconfigured');
    like($r->{log}, qr/\Acounter\.pl: misconfigured: cannot load Tokenlock\.pm/, 'the log says what is missing');

    # Tokenlock.pm without its parts: the log says what to copy.
    mkdir "$alone/lib" or die $!;
    File::Copy::copy("$repo/bindings/perl/lib/Tokenlock.pm", "$alone/lib/Tokenlock.pm") or die $!;
    $r = get('id=home', script => "$alone/counter.pl");
    check_response($r, 500, 'Tokenlock.pm without its directory Tokenlock/');
    like($r->{log}, qr{\Acounter\.pl: misconfigured: cannot load Tokenlock\.pm .*cannot find its part Tokenlock/Error\.pm: .*\Q$alone/lib/Tokenlock/\E here\); copy both}s,
        'the log names the part missing and the directory to copy');
    is(Tokenlock::read_counter("$data/home.count"), '9', 'and nothing was counted');

    copy_module("$alone/lib");
    is(get('id=home', script => "$alone/counter.pl")->{body}, "10\n", 'Tokenlock.pm and Tokenlock/ in lib/ beside the script');

    is(get('id=home', script => $src)->{body}, "11\n", 'in the source tree it finds bindings/perl/lib');
}

# --- many hits at once -----------------------------------------------------------------
{
    my ($PROCS, $HITS) = (8, 8);
    pipe(my $gate_r, my $gate_w) or die $!;
    my @pids;
    for (1 .. $PROCS) {
        push @pids, fork_worker(sub {
            close $gate_w;
            sysread($gate_r, my $buf, 1);
            for (1 .. $HITS) {
                my $r = get('id=load', env => { TOKENLOCK_COUNTER_SYNC => 'file_and_dir' });
                die "hit failed: $r->{raw} $r->{log}" unless ($r->{status} || '') eq '200';
            }
        });
    }
    close $gate_r;
    close $gate_w;
    is((grep { reap($_) == 0 } @pids), $PROCS, "$PROCS clients x $HITS hits: every hit answered 200");
    is(count_of('load'), ($PROCS * $HITS) . "\n", 'and the counter is exact');
}

done_testing();
