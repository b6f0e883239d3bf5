<?php
// One worker of the shared torture in PHP (shared.py has the log format and
// the checks): until STOPFILE exists, takes COUNTER.lock shared and reads
// the counter, or exclusively and increments it through the held token, or
// one of SLOTS slots of SEMDIR, each hold logged to the shared event LOG.
//   php shared_worker.php MODULE COUNTER SEMDIR SLOTS LEASE STOPFILE LOG SEED KINDS
// KINDS: the kinds of hold it chooses among, of r (reader), s (slot), w (writer).
[, $module, $counter, $semDir, $slots, $lease, $stop, $logPath, $seed, $kinds] = $argv + array_fill(0, 10, null);
if ($kinds === null) {
    fwrite(STDERR, "usage: shared_worker.php MODULE COUNTER SEMDIR SLOTS LEASE STOPFILE LOG SEED KINDS\n");
    exit(2);
}
require $module;
mt_srand((int) $seed);
$pid = getmypid();
// 'a' opens with O_APPEND: one fwrite and fflush per line puts each line
// whole in the shared log before the next step, whatever signal comes next.
$log = fopen($logPath, 'a');
$hold = 0;
$note = function (string $what) use ($log, $pid, &$hold): void {
    fwrite($log, sprintf("php %d %d %s %.6f\n", $pid, $hold, $what, microtime(true)));
    fflush($log);
};

// The counter as read inside a hold: "r V", or "r torn:HEX" for a text
// that is not one decimal and a newline.
function readNote(string $counter): string
{
    $text = @file_get_contents($counter);
    if ($text !== false && preg_match('/\A(0|[1-9][0-9]*)\n\z/', $text)) {
        return 'r ' . rtrim($text);
    }
    return 'r torn:' . bin2hex((string) $text);
}

// Commits V through the held token with the command (`tokenlock commit`,
// fenced: refused with exit 3 once the lock was taken over).
function commitThrough(\Tokenlock\Lock $lock, string $counter, string $value): int
{
    $cmd = [getenv('TOKENLOCK_COMMAND'), 'commit', '--sync', 'none', $lock->dir(), $lock->token(), $counter];
    $p = proc_open($cmd, [0 => ['pipe', 'r']], $pipes);
    fwrite($pipes[0], "$value\n");
    fclose($pipes[0]);
    return proc_close($p);
}

function holdOnce(string $kind, array $a, callable $note): void
{
    [$counter, $semDir, $slots, $lease] = $a;
    $opts = ['wait' => 60, 'lease' => (float) $lease];
    $dir = $kind === 's' ? $semDir : "$counter.lock";
    if ($kind === 's') {
        $opts['slots'] = (int) $slots;
    } elseif ($kind === 'r') {
        $opts['shared'] = true;
    }
    $lock = \Tokenlock\Lock::acquire($dir, $opts);
    $note("+ $kind");
    $lost = false;
    if ($kind === 'r') {
        $note(readNote($counter));
    } elseif ($kind === 'w') {
        $old = readNote($counter);
        if (str_starts_with($old, 'r torn:')) {
            $note($old);    // a failure of the run (shared.py): nothing is written over it
            $lock->release();
            $note('ok');
            return;
        }
        $v = (int) substr($old, 2) + 1;
        $note("c $v");
        if (mt_rand(0, 15) === 0 && function_exists('posix_kill')) {
            $note('s');     // shared.py continues it past the lease: the commit must then be refused
            posix_kill(getmypid(), SIGSTOP);
        }
        $rc = commitThrough($lock, $counter, (string) $v);
        $lost = $rc === 3;
        $note($rc === 0 ? "W $v" : ($lost ? 'l' : "e commit/$rc"));
    }
    // A hold of some length, for overlaps to check; one in ten long enough
    // for shared.py to stop it inside past its lease.
    usleep($kind !== 'w' && mt_rand(0, 9) === 0 ? mt_rand(200000, 400000) : mt_rand(0, $kind === 'w' ? 5000 : 30000));
    $note('-');
    try {
        $lock->release();
        $note($lost ? 'l' : 'ok');
    } catch (\Tokenlock\LockLostException $e) {
        $note('l');
        fwrite(STDERR, 'shared_worker.php: ' . $e->getMessage() . "\n");   // names the token, for shared.py's reader
    }
}

$holdArgs = [$counter, $semDir, $slots, $lease];
while (!file_exists($stop)) {
    $hold++;
    $r = mt_rand(0, 99);
    try {
        $kind = $r < 45 ? 'r' : ($r < 75 ? 's' : 'w');
        holdOnce(str_contains($kinds, $kind) ? $kind : 'r', $holdArgs, $note);
    } catch (\Tokenlock\Exception $e) {
        $note('e ' . $e->getError());
        fwrite(STDERR, 'shared_worker.php: ' . $e->getMessage() . "\n");
    }
    clearstatcache();
}
