<?php
// One torture worker in PHP: increments COUNTER through the module's public
// increment() until STOPFILE exists, logging each step to LOG (see
// torture.py, Logs).
//   php worker.php MODULE COUNTER STOPFILE LOG
[, $module, $counter, $stop, $logPath] = $argv + [null, null, null, null, null];
if ($logPath === null) {
    fwrite(STDERR, "usage: worker.php MODULE COUNTER STOPFILE LOG\n");
    exit(2);
}
require $module;
// 'a' opens with O_APPEND; fflush puts each line in the file before the
// next step, whatever signal comes next.
$log = fopen($logPath, 'a');
$note = function (string $what) use ($log): void {
    fwrite($log, sprintf("%s %.6f\n", $what, microtime(true)));
    fflush($log);
};
while (!file_exists($stop)) {
    $note('i');
    try {
        $v = \Tokenlock\increment($counter, ['wait' => 60]);
        $note("d $v");
    } catch (\Tokenlock\Exception $e) {
        $note($e->getError() === 'lock_lost' ? 'l' : 'e ' . $e->getError());
        fwrite(STDERR, 'worker.php: ' . $e->getMessage() . "\n");
    }
    clearstatcache();
}
